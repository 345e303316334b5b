"""Whole models at several sizes of TVM's CPU thread pool, in one process (runtime-only safe).

Co-execution leaves the host thread that drives the GPU (launches, copies, event waits) and
the CUDA driver's own threads to share the cores with the CPU kernels' workers; a parallel
kernel on statically partitioned workers waits for its slowest one. This times the plans of a
bench bundle (``bench_models.py build``; codl's plan and each of its candidates apart) with the
pool resized between timings (``runtime.config_threadpool``), interleaved round by round, so a
pool one or two workers short of the cores is compared with the full pool on the same
artifacts, instance and minute.

    # on the GPU machine, in the edge configuration (benchmarks/edge_gpu.sh starts/stops MPS):
    python benchmarks/cpu_threads.py run /tmp/work/bench-edge --threads 16,15,14,12 \
        --plans cpu-only,gpu-only,codl,oracle -o $OUT/cpu-threads-edge.json
    python benchmarks/cpu_threads.py report cpu-threads-edge.json
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
_MODE_BIG = 1  # runtime.config_threadpool: one worker per core, TVM's default


def _runners(model_dir: Path, plans: list[str]) -> dict[str, Any]:
    """Each plan's runner; a guarded plan's own plan and candidates as runners of their own."""
    from codl_tvm import runtime

    out: dict[str, Any] = {}
    for plan in plans:
        path = model_dir / plan
        if not (path / "manifest.json").is_file():
            continue
        out[plan] = runtime.load(path, choose=False)
        alternatives = out[plan].manifest.get("alternatives", [])
        for alt in alternatives:
            if alt["name"].startswith("plan-"):
                out[f"{plan}/{alt['name']}"] = runtime.load(path / alt["dir"], choose=False)
    return out


def time_model(model_dir: Path, plans: list[str], threads: list[int], rounds: int,
               deadline_s: float) -> dict[str, dict[str, list[float]]]:
    """Seconds per inference of every runner at every pool size: ``{runner: {threads: [s]}}``."""
    import tvm

    config = tvm.get_global_func("runtime.config_threadpool")
    runners = _runners(model_dir, plans)
    if not runners:
        raise SystemExit(f"{model_dir}: none of the plans {plans} is built there")
    inputs = {n: r.random_inputs(0) for n, r in runners.items()}
    times: dict[str, dict[str, list[float]]] = {n: {str(t): [] for t in threads} for n in runners}
    start = time.perf_counter()
    for k in range(rounds + 1):  # round 0 warms each pool size up
        order = threads[k % len(threads):] + threads[:k % len(threads)]
        for t in order:
            config(_MODE_BIG, t)
            names = list(runners)[k % len(runners):] + list(runners)[:k % len(runners)]
            runners[names[0]].time(inputs[names[0]], repeat=1, number=1)  # the new pool's start
            for n in names:
                s = runners[n].time(inputs[n], repeat=1, number=1)
                if k:
                    times[n][str(t)].append(s)
        if time.perf_counter() - start > deadline_s:
            break
    return times


def run(args: argparse.Namespace) -> int:
    root = Path(args.bundle)
    index = json.loads((root / "index.json").read_text())
    threads = [int(t) for t in args.threads.split(",")]
    doc: dict[str, Any] = {"threads": threads, "models": {}}
    models = args.models.split(",") if args.models else list(index)
    budget = args.deadline_s / max(len(models), 1)
    if args.jobs > 1:  # nvcc's results on disk before timing (CUDA kernels ship as source)
        from codl_tvm.planner.bundle import warm_artifacts

        dirs = [d.parent for m in models for d in (root / m).glob("*/**/manifest.json")]
        warm_artifacts(dirs, args.jobs)
    for model in models:
        times = time_model(root / model, args.plans.split(","), threads, args.rounds, budget)
        doc["models"][model] = {n: {t: 1e3 * float(np.median(v)) for t, v in by.items() if v}
                                for n, by in times.items()}
        doc["raw_ms"] = doc.get("raw_ms", {}) | {
            model: {n: {t: [1e3 * s for s in v] for t, v in by.items()}
                    for n, by in times.items()}}
        Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
        print(table(model, doc["models"][model], threads), flush=True)
    return 0


def table(model: str, medians: dict[str, dict[str, float]], threads: list[int]) -> str:
    """Median ms per runner and pool size, and each over the full pool's (the first size)."""
    head = f"== {model}\n{'runner':28s}" + "".join(f"{t:>9d}" for t in threads)
    head += "".join(f"{f'{t}/{threads[0]}':>9s}" for t in threads[1:])
    lines = [head]
    for name, by in medians.items():
        ms = [by.get(str(t), float("nan")) for t in threads]
        lines.append(f"{name:28s}" + "".join(f"{v:9.3f}" for v in ms)
                     + "".join(f"{v / ms[0]:9.3f}" for v in ms[1:]))
    return "\n".join(lines)


def report(args: argparse.Namespace) -> int:
    doc = json.loads(Path(args.result).read_text())
    for model, medians in doc["models"].items():
        print(table(model, medians, doc["threads"]))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="time a bench bundle's plans at several pool sizes")
    r.add_argument("bundle", help="a bench_models.py build folder (index.json)")
    r.add_argument("--threads", default="16,15,14,12", help="pool sizes, the full pool first")
    r.add_argument("--plans", default="cpu-only,gpu-only,codl,oracle")
    r.add_argument("--models", default="", help="comma-separated (default: the bundle's)")
    r.add_argument("--rounds", type=int, default=9)
    r.add_argument("--deadline-s", type=float, default=400)
    r.add_argument("--jobs", type=int, default=14, help="processes compiling CUDA first")
    r.add_argument("-o", "--output", required=True)
    p = sub.add_parser("report", help="print a result file's tables")
    p.add_argument("result")
    args = ap.parse_args()
    return run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
