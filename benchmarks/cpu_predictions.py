"""CPU-only whole-model predictions from measured ops: samples timed warm, and weights evicted.

    python benchmarks/cpu_predictions.py [--models resnet-18,...] [--json F] [--work DIR]
        [--grid 1.0]

On this host's ``cpu-pair``, per model: every op measured twice into samples files (the
measurement ``codl-tvm bench`` makes where no predictor ships), once with each CPU sample's
weights left in the caches by the previous call (``Protocol(cpu_cold_weights=False)``) and
once evicted before each call (the default, :mod:`codl_tvm.profiler.rounds`); the CPU-only
plan's ``predicted_us`` from each; then the model itself, compiled CPU-only and timed
(``time_evaluator``, median of 30). Prints predicted / measured and writes the rows to
``--json``. Samples files go to ``--work`` (default: a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODELS = "resnet-18,mobilenet-v2,yolo-v2,mobilenet-v1,inception-v3,vgg-16"


def model_row(name: str, work: Path, grid: tuple[float, ...] | None = None) -> dict:
    import codl_tvm
    from codl_tvm import zoo
    from codl_tvm.planner.api import make_plan, measured_costs
    from codl_tvm.planner.opgraph import build_graph
    from codl_tvm.profiler.rounds import Protocol

    mod = zoo.load(name)
    pair = codl_tvm.DevicePair.preset("cpu-pair")
    mg = build_graph(mod)
    row: dict = {"model": name}
    grid_kw = {"grid": grid} if grid else {}  # default: measured_costs' grid
    for label, cold in (("warm", False), ("cold", True)):
        costs = measured_costs(mg, pair, work / f"{name}-{label}.csv",
                               proto=Protocol(cpu_cold_weights=cold), **grid_kw)
        row[f"{label}_predicted_ms"] = make_plan(mg, "cpu-only", costs).predicted_us / 1e3
    exe = codl_tvm.compile(mod, pair, codl_tvm.Plan.single(mod, "cpu"))
    row["measured_ms"] = exe.time(exe.random_inputs(), repeat=30) * 1e3
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=MODELS)
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--work", help="keep the samples files in this folder")
    p.add_argument("--grid", type=lambda v: tuple(float(x) for x in v.split(",")),
                   help="GPU shares to measure (default: the planner's measure grid); the "
                        "CPU-only plan reads only the whole ops: --grid 1.0 measures those")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="codl-cpu-pred-") as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in args.models.split(","):
            rows.append(model_row(name, work, args.grid))
            print(json.dumps(rows[-1]), flush=True)
    print("| model | measured ms | predicted / measured, warm samples | weights evicted |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['measured_ms']:.2f} | "
              f"{r['warm_predicted_ms'] / r['measured_ms']:.2f} | "
              f"{r['cold_predicted_ms'] / r['measured_ms']:.2f} |")
    if args.json:
        from codl_tvm.outputs import write_json

        write_json(args.json, {"machine": "cpu-pair", "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
