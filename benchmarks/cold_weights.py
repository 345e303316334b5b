"""Do a model's CPU kernels, each timed alone, add up to the model? Warm, and weights evicted.

    # here (full TVM): CPU-only artifacts, without weights (the runtime draws them)
    python benchmarks/cold_weights.py build -o .devcarry/cold [--mcpu sapphirerapids --num-cores 16]
    # where it runs (runtime-only TVM and numpy)
    python benchmarks/cold_weights.py run .devcarry/cold --json OUT.json --machine NAME
    python benchmarks/cold_weights.py report benchmarks/results/cold-weights.json [MORE.json] \
        [--predictor P.json --pair PAIR]       # and the planner's CPU-only estimate from P

Per model: the whole model's median latency (``time_evaluator``), then every kernel call of
one inference captured with its arguments (the VM's instrument) and called alone, with its
own arguments, 20 times after 3 warm-ups: **warm** (as they are after the previous call) and
**cold** (every argument between the first and the last, the kernel's weights, evicted from
the caches before each call by TVM's ``cache_flush_cpu_non_first_arg``, as the profiler times
CPU samples of ops with weights: :mod:`codl_tvm.profiler.rounds`). Each kernel's figure is
the median of its calls; a row gives the sums against the whole model. Rows merge into
``--json`` keyed by (model, machine).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODELS = "resnet-18,mobilenet-v2,yolo-v2,mobilenet-v1,inception-v3,posenet,vgg-16"
CALLS, WARMUP = 20, 3


def build(args: argparse.Namespace) -> int:
    import codl_tvm
    from codl_tvm import zoo
    from codl_tvm.device import DevicePair

    host = DevicePair.preset("cpu-pair", num_cores=args.num_cores)  # this host's CPU target
    spec = {**host.cpu_spec, **({"mcpu": args.mcpu} if args.mcpu else {})}
    pair = DevicePair("cpu-pair", spec, dict(spec), cpu_index=0, gpu_index=1)
    out = Path(args.out)
    for name in args.models.split(","):
        mod = zoo.load(name)
        exe = codl_tvm.compile(mod, pair, codl_tvm.Plan.single(mod, "cpu"))
        exe.export(out / name, weights=False, overwrite=True)
        print(f"{name}: {out / name}", flush=True)
    return 0


def kernel_calls(runner: Any, inputs: dict[str, np.ndarray]) -> list[tuple[str, list[Any]]]:
    """Every kernel call of one inference with copies of its arguments (VM builtins left out)."""
    import tvm

    calls: list[tuple[str, list[Any]]] = []

    def instrument(_func: Any, name: str, before: bool, _ret: Any, *args: Any) -> int:
        if before and not name.startswith("vm."):
            calls.append((name, [a.copyto(tvm.cpu()) if hasattr(a, "copyto") else a
                                 for a in args]))
        return 0

    runner.vm.set_instrument(instrument)
    runner.run(inputs)
    runner.vm.set_instrument(None)
    return calls


def _function(lib: Any, name: str) -> Any:
    for module in [lib, *lib.imports, *(i for sub in lib.imports for i in sub.imports)]:
        try:
            f = module.get_function(name)
        except Exception:  # noqa: BLE001 - not in this module
            f = None
        if f is not None:
            return f
    raise KeyError(f"no kernel {name} in the library")


def time_call(f: Any, args: list[Any], flush: Any | None) -> float:
    """Median ms of ``f(*args)``; ``flush``: evict args[1:-1] from the caches before each."""
    for _ in range(WARMUP):
        f(*args)
    costs = []
    for _ in range(CALLS):
        if flush is not None and len(args) > 2:
            flush(*args[:-1])  # clflush of every argument but the first; the output stays
        t0 = time.perf_counter()
        f(*args)
        costs.append(time.perf_counter() - t0)
    return float(np.median(costs)) * 1e3


def run_model(folder: Path) -> dict[str, Any]:
    import tvm

    from codl_tvm import runtime

    runner = runtime.load(folder)
    inputs = runner.random_inputs(seed=0)
    for _ in range(3):
        runner.run(inputs)
    whole_ms = runner.time(inputs, repeat=30) * 1e3
    lib = tvm.runtime.load_module(str(folder / runtime.LIBRARY))
    flush = tvm.get_global_func("cache_flush_cpu_non_first_arg")
    warm = cold = 0.0
    calls = kernel_calls(runner, inputs)
    for name, args in calls:
        f = _function(lib, name)
        warm += time_call(f, args, None)
        cold += time_call(f, args, flush)
    return {"model": folder.name, "whole_ms": round(whole_ms, 3), "kernels": len(calls),
            "warm_sum_ms": round(warm, 3), "cold_sum_ms": round(cold, 3),
            "threads": runner.cpu_threads}


def run(args: argparse.Namespace) -> int:
    rows = []
    for folder in sorted(p for p in Path(args.dir).iterdir() if (p / "manifest.json").exists()):
        row = {**run_model(folder), "machine": args.machine}
        print(json.dumps(row), flush=True)
        rows.append(row)
    merge(Path(args.json), rows)
    return 0


def merge(path: Path, rows: list[dict[str, Any]]) -> None:
    from codl_tvm.outputs import write_json

    old = json.loads(path.read_text())["rows"] if path.exists() else []
    keys = {(r["model"], r["machine"]) for r in rows}
    write_json(path, {"rows": [r for r in old if (r["model"], r["machine"]) not in keys] + rows})


def predicted_ms(model: str, predictor: str, pair: str) -> float:
    """The planner's CPU-only estimate of ``model`` from ``predictor`` on ``pair``."""
    from codl_tvm import DevicePair, zoo
    from codl_tvm.planner.api import make_plan, resolve_costs
    from codl_tvm.planner.opgraph import build_graph

    costs = resolve_costs(predictor, DevicePair.parse(pair))
    return make_plan(build_graph(zoo.load(model)), "cpu-only", costs).predicted_us / 1e3


def report(args: argparse.Namespace) -> int:
    rows = [r for f in args.files for r in json.loads(Path(f).read_text())["rows"]]
    if args.output:
        merge(Path(args.output), rows)
    extra = f" predicted ({Path(args.predictor).name}) / whole |" if args.predictor else ""
    print(f"| machine | model | kernels | whole ms | warm sum / whole | cold sum / whole |{extra}")
    print("|---|---|---:|---:|---:|---:|" + ("---:|" if extra else ""))
    for r in sorted(rows, key=lambda r: (r["machine"], r["model"])):
        pred = (f" {predicted_ms(r['model'], args.predictor, args.pair) / r['whole_ms']:.2f} |"
                if extra else "")
        print(f"| {r['machine']} | {r['model']} | {r['kernels']} | {r['whole_ms']:.2f} | "
              f"{r['warm_sum_ms'] / r['whole_ms']:.2f} | "
              f"{r['cold_sum_ms'] / r['whole_ms']:.2f} |{pred}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="CPU-only artifacts of the models, without weights")
    b.add_argument("-o", "--out", required=True)
    b.add_argument("--models", default=MODELS)
    b.add_argument("--mcpu", help="the CPU to build for (default: this host's)")
    b.add_argument("--num-cores", type=int, help="threads (default: this host's cores)")
    r = sub.add_parser("run", help="time the artifacts in DIR (runtime-only TVM)")
    r.add_argument("dir")
    r.add_argument("--json", required=True)
    r.add_argument("--machine", default="here")
    t = sub.add_parser("report", help="the table of result files")
    t.add_argument("files", nargs="+")
    t.add_argument("-o", "--output", help="merge the rows into this file")
    t.add_argument("--predictor", help="also the planner's CPU-only estimate from this predictor")
    t.add_argument("--pair", default="x86-cuda", help="the pair the predictor plans for")
    args = p.parse_args()
    if args.cmd == "build":
        return build(args)
    if args.cmd == "run":
        return run(args)
    return report(args)


if __name__ == "__main__":
    sys.exit(main())
