"""Whole split models with the native against the Python stream functions (the same
artifacts, loaded both ways), and with the CPU's part of each row split in chunks (the CUDA
default) against in one piece (``cpu_chunks=1``), timed in interleaved rounds in one process.

    python benchmarks/streams_ab.py build --models yolo-v2,vgg-16 --out .devcarry/streams-ab
    TVM_USE_RUNTIME_LIB=1 python benchmarks/streams_ab.py run .devcarry/streams-ab \
        --json streams-ab.json

A split op calls five stream functions and 2-D copies (:mod:`codl_tvm.streams`), so their cost
grows with the number of split ops. The plan here is a fixed rule that splits many ops, not
the planner's: every 3x3 conv is split as the single-op results at 8 SMs favour it
(``COEXEC.md``), by rows at a GPU share of 0.8 where its output has more than 13 rows and by
channels at 0.8125 otherwise; every other op runs on the GPU. ``run`` prints, per model,
GPU-only, the plan with each implementation and their ratio, the plan built with the CPU's
rows in one piece, and checks that all give the same output.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from coexec_conv import H100_CPU, H100_GPU  # noqa: E402 - the sibling module, after the path

MODELS = ("yolo-v2", "vgg-16", "resnet-18")
ROW_SHARE, CHANNEL_SHARE, FEW_ROWS = 0.8, 0.8125, 13
IMPLEMENTATIONS = ("native", "python")
ONE_CHUNK = "split-3x3/one-chunk"  # the plan with cpu_chunks=1, native functions


def split_3x3_plan(mod):
    """The rule of the module doc, as a :class:`~codl_tvm.Plan`."""
    from codl_tvm import Plan
    from codl_tvm.graph import entry_function, find_anchors
    from codl_tvm.plan import OpPlacement

    plan = Plan.single(mod, "gpu")
    for a in find_anchors(entry_function(mod)):
        doc = a.describe()
        if a.kind == "conv2d" and doc.get("weight", [0, 0, 0])[2:] == [3, 3] and \
                doc.get("groups", 1) == 1:
            rows = doc["out"][2]
            plan.ops[a.op_id] = (OpPlacement("split", "H", ROW_SHARE) if rows > FEW_ROWS
                                 else OpPlacement("split", "OC", CHANNEL_SHARE))
    return plan


def build(args: argparse.Namespace) -> None:
    import codl_tvm
    from codl_tvm import Plan, zoo

    pair = (codl_tvm.DevicePair("x86-cuda", H100_CPU, H100_GPU) if args.pair == "h100"
            else codl_tvm.DevicePair.preset(args.pair))
    out = Path(args.out)
    runs = []
    for name in args.models.split(","):
        mod = codl_tvm.load_model(zoo.get(name))
        plans = {"gpu-only": (Plan.single(mod, "gpu"), {}),
                 "split-3x3": (split_3x3_plan(mod), {}),
                 ONE_CHUNK: (split_3x3_plan(mod), {"cpu_chunks": 1})}
        for variant, (plan, options) in plans.items():
            t0 = time.time()
            exe = codl_tvm.compile(mod, pair, plan, **options)
            path = out / name / variant.replace("/", "_")
            exe.export(path, weights=False)
            splits = sum(p.place == "split" for p in plan.ops.values())
            runs.append({"model": name, "variant": variant, "path": str(path.relative_to(out)),
                         "split_ops": splits, "cpu_chunks": exe.manifest["cpu_chunks"]})
            print(f"{name:12s} {variant:10s} {splits:3d} split ops {time.time() - t0:6.1f} s",
                  flush=True)
    (out / "index.json").write_text(json.dumps({"pair": pair.to_json(), "runs": runs}, indent=1))


def load_both(path: Path) -> dict:
    """The artifact loaded once per implementation (the VM looks the functions up when it
    is made)."""
    from codl_tvm import runtime, streams

    loaded = {}
    for impl in IMPLEMENTATIONS:
        with streams.using(impl):
            loaded[impl] = runtime.load(path, choose=False)
    return loaded


def run(args: argparse.Namespace) -> None:
    from codl_tvm import runtime, streams

    root = Path(args.dir)
    index = json.loads((root / "index.json").read_text())
    rows, by_model = [], {}
    for r in index["runs"]:
        by_model.setdefault(r["model"], []).append(r)
    for model, runs in by_model.items():
        runners = {}
        for r in runs:
            if r["split_ops"] and r["variant"] != ONE_CHUNK:
                for impl, rn in load_both(root / r["path"]).items():
                    runners[f"{r['variant']}/{impl}"] = rn
            else:
                runners[r["variant"]] = runtime.load(root / r["path"], choose=False)
        inputs = next(iter(runners.values())).random_inputs(seed=1)
        outs = {v: rn.run(inputs)[0] for v, rn in runners.items()}
        times: dict[str, list[float]] = {v: [] for v in runners}
        for _ in range(args.rounds):
            for variant, rn in runners.items():
                times[variant].append(rn.time(inputs, repeat=args.repeat, number=args.number))
        gpu = float(np.median(times["gpu-only"]))
        for variant, ts in times.items():
            ms = 1e3 * float(np.median(ts))
            rows.append({"model": model, "variant": variant, "latency_ms": ms,
                         "spread_ms": 1e3 * float(np.max(ts) - np.min(ts)),
                         "vs_gpu_only": gpu * 1e3 / ms,
                         "split_ops": next(r["split_ops"] for r in runs
                                           if variant.startswith(r["variant"]))})
        same = np.array_equal(outs["split-3x3/native"], outs["split-3x3/python"])
        err = (float(np.linalg.norm(outs[ONE_CHUNK] - outs["split-3x3/native"])
                     / np.linalg.norm(outs["split-3x3/native"])) if ONE_CHUNK in outs else None)
        by = {r["variant"]: r["latency_ms"] for r in rows if r["model"] == model}
        chunks = (f"  chunked/one-chunk {by['split-3x3/native'] / by[ONE_CHUNK]:.3f}"
                  if ONE_CHUNK in by else "")
        print(f"{model:12s} gpu-only {by['gpu-only']:8.3f} ms  native {by['split-3x3/native']:8.3f}"
              f"  python {by['split-3x3/python']:8.3f}  native/python "
              f"{by['split-3x3/native'] / by['split-3x3/python']:.3f}{chunks}  same output "
              f"{same}", flush=True)
        rows.append({"model": model, "variant": "check", "same_output": bool(same),
                     "one_chunk_rel_err": err})
    result = {"pair": index["pair"], "sms": args.sms, "streams": streams.implementation()[0],
              "rows": rows, "command": " ".join(sys.argv)}
    Path(args.json).write_text(json.dumps(result, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--models", default=",".join(MODELS))
    b.add_argument("--out", required=True)
    b.add_argument("--pair", default="h100", help="h100 (default) or a preset name")
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--json", required=True)
    r.add_argument("--rounds", type=int, default=9)
    r.add_argument("--repeat", type=int, default=5)
    r.add_argument("--number", type=int, default=3)
    r.add_argument("--sms", default="all", help="SMs the GPU was held to (recorded)")
    args = ap.parse_args()
    {"build": build, "run": run}[args.cmd](args)


if __name__ == "__main__":
    main()
