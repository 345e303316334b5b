"""A guarded plan while another program takes CPU cores: the load-time guard against the
adaptive guard (``codl_tvm.adaptive_guard``), with GPU-only as the floor (runtime-only safe).

Per model of a bench bundle (``bench_models.py build --guard --candidates``): codl's artifact
loaded twice, guarded once at load (``runtime.load``) and guarded call after call
(``runtime.load(..., adapt=True)``), and GPU-only, timed one call each in rotated rounds through
three phases: quiet, busy (``--hogs`` processes spinning on the CPU, as other apps on a phone
or other guests of a host), quiet again.

    # on the GPU machine, in the edge configuration (benchmarks/edge_gpu.sh starts/stops MPS):
    python benchmarks/interference.py run /tmp/work/bench-edge --models yolo-v2,vgg-16 \
        --hogs 8 -o $OUT/interference-edge.json
    python benchmarks/interference.py report interference-edge.json
    python benchmarks/interference.py replay interference-edge.json  # today's policy on it
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
PHASES = ("quiet", "busy", "quiet-again")
RUNNERS = ("load-time guard", "adaptive guard", "gpu-only")


def _spin() -> None:
    while True:
        pass


def run_model(model_dir: Path, hogs: int, phase_s: float) -> dict[str, Any]:
    """Each phase's per-call latencies (ms) of the three runners, and what the adaptive
    guard ran in it: call by call, each call's alternative, milliseconds and the cores the host
    showed other programs taking (``adaptive_calls``)."""
    from codl_tvm import runtime

    runners = {"load-time guard": runtime.load(model_dir / "codl"),
               "adaptive guard": runtime.load(model_dir / "codl", adapt=True),
               "gpu-only": runtime.load(model_dir / "gpu-only", choose=False)}
    inputs = {n: r.random_inputs(0) for n, r in runners.items()}
    for name, r in runners.items():  # warm-up
        r.time(inputs[name], repeat=1)
    adaptive = runners["adaptive guard"]
    doc: dict[str, Any] = {"load_time_choice": runners["load-time guard"].choice, "phases": []}
    for phase in PHASES:
        procs = [mp.Process(target=_spin, daemon=True) for _ in range(hogs if phase == "busy"
                                                                       else 0)]
        for p in procs:
            p.start()
        before = dict(adaptive.chooser.runs_)
        ms: dict[str, list[float]] = {n: [] for n in runners}
        calls: list[tuple[str, float, float | None]] = []  # the adaptive guard's, in order
        start, k = time.perf_counter(), 0
        try:
            while time.perf_counter() - start < phase_s:
                names = list(runners)
                for n in names[k % 3:] + names[:k % 3]:
                    ms[n].append(1e3 * runners[n].time(inputs[n], repeat=1))
                    if n == "adaptive guard":
                        calls.append((adaptive.chooser.last_, round(ms[n][-1], 3),
                                      adaptive.cpu_load.last_cores))
                k += 1
        finally:
            for p in procs:
                p.terminate()
                p.join()
        runs = {n: c - before.get(n, 0) for n, c in adaptive.chooser.runs_.items()}
        doc["phases"].append({"phase": phase, "hogs": len(procs), "rounds": k,
                              "median_ms": {n: float(np.median(v)) for n, v in ms.items()},
                              "mean_ms": {n: float(np.mean(v)) for n, v in ms.items()},
                              "adaptive_runs": runs, "adaptive_after": adaptive.chooser.summary(),
                              "adaptive_calls": calls})
        print(line(doc["phases"][-1]), flush=True)
    return doc


def line(phase: dict[str, Any]) -> str:
    med = phase["median_ms"]
    runs = ", ".join(f"{n} {c}" for n, c in phase["adaptive_runs"].items() if c)
    return (f"  {phase['phase']:11s} hogs={phase['hogs']:2d} rounds={phase['rounds']:4d}  " +
            "  ".join(f"{n} {med[n]:7.2f} ms" for n in RUNNERS) + f"  | adaptive ran: {runs}")


def report(doc: dict[str, Any]) -> str:
    """Markdown: per model and phase, each runner's median (mean) and its speedup over
    GPU-only (of the medians)."""
    out = ["| model | phase | hogs | load-time guard ms | adaptive guard ms | GPU-only ms | "
           "load-time / GPU-only | adaptive / GPU-only | adaptive ran |",
           "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for model, m in doc["models"].items():
        for p in m["phases"]:
            med, mean = p["median_ms"], p.get("mean_ms", {})
            g = med["gpu-only"]
            ms = {n: f"{med[n]:.2f}" + (f" ({mean[n]:.2f})" if n in mean else "")
                  for n in RUNNERS}
            runs = ", ".join(f"{n} {c}" for n, c in p["adaptive_runs"].items() if c)
            out.append(f"| {model} | {p['phase']} | {p['hogs']} | {ms['load-time guard']} | "
                       f"{ms['adaptive guard']} | {ms['gpu-only']} | "
                       f"{g / med['load-time guard']:.2f}x | {g / med['adaptive guard']:.2f}x | "
                       f"{runs} |")
    return "\n".join(out)


def replay(doc: dict[str, Any], calls: tuple[int, int, int] = (100, 300, 300)) -> str:
    """Today's adaptive policy on a run's figures: per model, each alternative at its
    load-time figure in the quiet phases and, busy, the ones that use the CPU slowed as the
    load-time guard's pick was (its busy median over its quiet one), the host showing the
    run's spinning processes as cores taken by others; what it runs."""
    from codl_tvm.adaptive_guard import Chooser

    out = ["| model | busy slowdown | busy: GPU-only from call | busy: split calls | "
           "quiet again: its pick from call |", "|---|---:|---:|---:|---:|"]
    for model, m in doc["models"].items():
        load = {n: ms / 1e3 for n, ms in m["load_time_choice"]["latency_ms"].items()}
        med = {p["phase"]: p["median_ms"]["load-time guard"] for p in m["phases"]}
        slow = med["busy"] / med["quiet"]
        busy = {n: s if n == "gpu-only" else slow * s for n, s in load.items()}
        chooser = Chooser(load, cpu_free=frozenset({"gpu-only"}))
        others = (0.0, float(doc.get("hogs", 8)), 0.0)
        ran = [chooser.replay(lat, n, o) for n, lat, o in zip(calls, (load, busy, load), others)]
        pick = ran[0][-1]
        back = next((i for i in range(len(ran[2])) if ran[2][i:i + 5] == [pick] * 5), None)
        out.append(f"| {model} | {slow:.1f}x | {ran[1].index('gpu-only') + 1} | "
                   f"{sum(n != 'gpu-only' for n in ran[1])} of {calls[1]} | "
                   f"{'-' if back is None else back + 1} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from codl_tvm.outputs import write_json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="time the phases on the models of a bench bundle")
    r.add_argument("bundle", type=Path)
    r.add_argument("--models", default="yolo-v2")
    r.add_argument("--hogs", type=int, default=8, help="processes spinning in the busy phase")
    r.add_argument("--phase-s", type=float, default=15.0)
    r.add_argument("-o", "--output", type=Path, required=True)
    for cmd, what in (("report", "markdown table of a run's JSON"),
                      ("replay", "today's adaptive policy on a run's figures")):
        sub.add_parser(cmd, help=what).add_argument("result", type=Path)
    args = ap.parse_args(argv)
    if args.cmd in ("report", "replay"):
        print((report if args.cmd == "report" else replay)(json.loads(args.result.read_text())))
        return 0
    doc: dict[str, Any] = {"hogs": args.hogs, "phase_s": args.phase_s, "models": {}}
    for model in args.models.split(","):
        if not (args.bundle / model).is_dir():
            ap.error(f"{args.bundle / model}: no such model in the bundle")
        if not (args.bundle / model / "codl").is_dir():  # codl planned it on one processor
            print(f"{model}: no codl artifact (its plan runs on one processor), skipped")
            continue
        print(model, flush=True)
        doc["models"][model] = run_model(args.bundle / model, args.hogs, args.phase_s)
        write_json(args.output, doc)  # a run cut short keeps what it measured
    print(report(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
