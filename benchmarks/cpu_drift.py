"""How a machine's CPU speed moves over seconds and minutes (runtime-only safe).

Times one model's CPU-only artifact of a bench bundle (``bench_models.py build``) call after
call in phases: alone, interleaved with its GPU-only artifact, and between them a probe that
shares no code with TVM (a 2048x2048 float32 matmul on numpy's BLAS threads). Run twice in a
row, a second process tells a drift of the host from a state of the first process.

    # on the GPU machine, in the edge configuration (benchmarks/edge_gpu.sh starts/stops MPS):
    python benchmarks/cpu_drift.py run /tmp/work/bench-edge --model posenet -o $OUT/drift-1.json
    python benchmarks/cpu_drift.py run /tmp/work/bench-edge --model posenet -o $OUT/drift-2.json \
        --phases probe,alone,probe
    python benchmarks/cpu_drift.py report drift-1.json drift-2.json -o cpu-drift-edge.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
PHASES = "probe,alone,probe,with-gpu,probe,alone,probe"
PROBE_N = 2048
BUCKET_S = 3.0


def run(bundle: Path, model: str, phases: list[str], phase_s: float) -> list[dict[str, Any]]:
    """Per phase: ``(seconds since the phase began, ms)`` of each call."""
    from codl_tvm import runtime

    cpu = runtime.load(bundle / model / "cpu-only", choose=False)
    gpu = runtime.load(bundle / model / "gpu-only", choose=False) if "with-gpu" in phases else None
    x = cpu.random_inputs(0)
    xg = gpu.random_inputs(0) if gpu else None
    a = np.random.default_rng(0).standard_normal((PROBE_N, PROBE_N)).astype(np.float32)
    out = []
    for name in phases:
        rows: list[tuple[float, float]] = []
        start = time.perf_counter()
        seconds = phase_s / 2 if name == "probe" else phase_s
        while time.perf_counter() - start < seconds:
            t = time.perf_counter()
            if name == "probe":
                a @ a
                rows.append((t - start, 1e3 * (time.perf_counter() - t)))
                continue
            if name == "with-gpu":
                gpu.time(xg, repeat=1)
            rows.append((time.perf_counter() - start, 1e3 * cpu.time(x, repeat=1)))
        out.append({"phase": name, "rows": rows} | summary(rows))
        print(line(out[-1]), flush=True)
    return out


def summary(rows: list[tuple[float, float]]) -> dict[str, Any]:
    """Median, 10th and 90th percentile (ms), and the median of each ``BUCKET_S`` window."""
    ms = np.array([m for _, m in rows])
    buckets: dict[int, list[float]] = {}
    for t, m in rows:
        buckets.setdefault(int(t // BUCKET_S), []).append(m)
    return {"n": len(ms), "median_ms": float(np.median(ms)),
            "p10_ms": float(np.percentile(ms, 10)), "p90_ms": float(np.percentile(ms, 90)),
            "window_medians_ms": [float(np.median(v)) for _, v in sorted(buckets.items())]}


def line(phase: dict[str, Any]) -> str:
    windows = " ".join(f"{m:.1f}" for m in phase["window_medians_ms"])
    return (f"{phase['phase']:9s} n={phase['n']:4d} median {phase['median_ms']:7.2f} ms "
            f"(p10 {phase['p10_ms']:.2f}, p90 {phase['p90_ms']:.2f}); per {BUCKET_S:.0f} s: "
            f"{windows}")


def report(paths: list[Path], output: Path | None) -> dict[str, Any]:
    """The processes' phases in order, without the per-call rows."""
    from codl_tvm.outputs import write_json

    doc: dict[str, Any] = {"processes": []}
    for i, path in enumerate(paths):
        run_doc = json.loads(path.read_text())
        doc.setdefault("model", run_doc["model"])
        print(f"process {i + 1} ({path.name})")
        phases = [{k: v for k, v in p.items() if k != "rows"} for p in run_doc["phases"]]
        for p in phases:
            print("  " + line(p))
        doc["processes"].append({"phases": phases})
    if output:
        write_json(output, doc)
    return doc


def main(argv: list[str] | None = None) -> int:
    from codl_tvm.outputs import write_json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="time the phases in this process")
    r.add_argument("bundle", type=Path)
    r.add_argument("--model", default="posenet")
    r.add_argument("--phases", default=PHASES,
                   help=f"comma-separated of probe, alone, with-gpu (default {PHASES})")
    r.add_argument("--phase-s", type=float, default=10.0, help="seconds a phase (probe: half)")
    r.add_argument("-o", "--output", type=Path, required=True)
    p = sub.add_parser("report", help="the runs' phases, in order, as one JSON")
    p.add_argument("runs", type=Path, nargs="+")
    p.add_argument("-o", "--output", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "report":
        report(args.runs, args.output)
        return 0
    phases = args.phases.split(",")
    if bad := set(phases) - {"probe", "alone", "with-gpu"}:
        ap.error(f"unknown phase(s): {', '.join(sorted(bad))}")
    doc = {"model": args.model, "phases": run(args.bundle, args.model, phases, args.phase_s)}
    write_json(args.output, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
