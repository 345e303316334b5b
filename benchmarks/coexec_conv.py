"""Co-execution of single conv layers: CPU-only, GPU-only, and H / OC splits at many ratios.

Issue 2's end-to-end proof of the mechanism on a real CPU+GPU pair: every YOLO-V2 conv shape of
``shared/workloads/conv2d.csv`` (conv + bias + leaky ReLU, as in the network) is compiled here
for the pair and run there with only the TVM runtime.

Build here (full TVM), run there (runtime only)::

    python benchmarks/coexec_conv.py build --pair h100 --out .devcarry/coexec
    TVM_USE_RUNTIME_LIB=1 python benchmarks/coexec_conv.py run .devcarry/coexec --json out.json

``build`` exports artifacts without weights (the runtime draws random ones), except for one
small shape whose artifacts keep their weights so ``run`` can check every split against the
GPU-only output on the real devices. ``run`` warms the CUDA compile cache in parallel
processes, then times every variant of a shape in interleaved rounds (median of rounds).
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WORKLOADS = ROOT.parent / "shared" / "workloads" / "conv2d.csv"
RATIOS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
# the machine of shared/gpu/README.md
H100_CPU = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16}
H100_GPU = {"kind": "cuda", "arch": "sm_90"}


def yolo_shapes(path: Path = WORKLOADS) -> list[dict]:
    """Unique YOLO-V2 conv shapes, in file order."""
    seen, shapes = set(), []
    with open(path) as fh:
        for row in csv.DictReader(fh):
            if row["CNN"] != "YOLO-V2":
                continue
            key = tuple(int(row[k]) for k in ("IH", "IW", "IC", "OC", "KH", "KW", "SH", "SW"))
            if key not in seen:
                seen.add(key)
                shapes.append(dict(zip(("h", "w", "ic", "oc", "kh", "kw", "sh", "sw"), key)))
    return shapes


def shape_name(s: dict) -> str:
    return f"{s['h']}x{s['w']}x{s['ic']}-{s['oc']}-k{s['kh']}s{s['sh']}"


def conv_module(s: dict, seed: int = 0):
    from tvm import relax
    from tvm.relax import op as rop

    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, s["ic"], s["h"], s["w"]), "float32"))
    pad = (s["kh"] - 1) // 2  # SAME for the odd kernels of YOLO-V2, stride 1
    w = (rng.standard_normal((s["oc"], s["ic"], s["kh"], s["kw"])) /
         np.sqrt(s["ic"] * s["kh"] * s["kw"])).astype("float32")
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(rop.nn.conv2d(x, relax.const(w), strides=(s["sh"], s["sw"]),
                                      padding=(pad, pad, pad, pad)))
            y = bb.emit(rop.add(y, relax.const(rng.standard_normal((1, s["oc"], 1, 1))
                                               .astype("float32"))))
            out = bb.emit_output(rop.nn.leakyrelu(y, 0.1))
        bb.emit_func_output(out)
    return bb.get()


def variants(mod) -> dict:
    from codl_tvm import Plan

    plans = {"cpu-only": Plan.single(mod, "cpu"), "gpu-only": Plan.single(mod, "gpu")}
    for dim in ("H", "OC"):
        for r in RATIOS:
            plans[f"{dim}@{r}"] = Plan.uniform(mod, dim, r)
    return plans


def build(args: argparse.Namespace) -> None:
    import warnings

    import codl_tvm

    pair = (codl_tvm.DevicePair("x86-cuda", H100_CPU, H100_GPU) if args.pair == "h100"
            else codl_tvm.DevicePair.preset(args.pair))
    out = Path(args.out)
    shapes = yolo_shapes()[: args.limit] if args.limit else yolo_shapes()
    # the smallest weights: the shape whose split outputs are checked against GPU-only
    check = min(shapes, key=lambda s: s["ic"] * s["oc"] * s["kh"] * s["kw"])
    manifest = []
    for s in shapes:
        mod = codl_tvm.load_model(conv_module(s))
        keep = s is check
        for name, plan in variants(mod).items():
            t0 = time.time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exe = codl_tvm.compile(mod, pair, plan)
            path = out / shape_name(s) / name.replace("@", "_")
            exe.export(path, weights=keep)
            manifest.append({"shape": s, "name": shape_name(s), "variant": name,
                             "path": str(path.relative_to(out)), "checked": keep})
            print(f"{shape_name(s):28s} {name:10s} {time.time() - t0:5.1f} s", flush=True)
    (out / "index.json").write_text(json.dumps({"pair": pair.to_json(), "runs": manifest},
                                               indent=1))


def _warm(paths: list[str]) -> int:
    from codl_tvm import runtime

    for p in paths:
        runtime.load(p)
    return len(paths)


def run(args: argparse.Namespace) -> None:
    from codl_tvm import runtime

    root = Path(args.dir)
    index = json.loads((root / "index.json").read_text())
    os.environ.setdefault("CODL_CUDA_CACHE", "/tmp/codl-cuda-cache")
    paths = [str(root / r["path"]) for r in index["runs"]]
    t0 = time.time()
    chunks = [paths[i:: args.jobs] for i in range(args.jobs)]
    # spawn: a forked child cannot use CUDA once the parent has touched it
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        sum(pool.map(_warm, chunks))
    print(f"warmed {len(paths)} artifacts in {time.time() - t0:.0f} s", flush=True)
    rows, checks = [], []
    by_shape: dict[str, list[dict]] = {}
    for r in index["runs"]:
        by_shape.setdefault(r["name"], []).append(r)
    for name, runs in by_shape.items():
        runners = {r["variant"]: runtime.load(root / r["path"]) for r in runs}
        inputs = next(iter(runners.values())).random_inputs(seed=1)
        if runs[0]["checked"]:
            (ref,) = runners["gpu-only"].run(inputs)
            for variant, rn in runners.items():
                (out,) = rn.run(inputs)
                err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
                checks.append({"shape": name, "variant": variant, "rel_error": err})
        times: dict[str, list[float]] = {v: [] for v in runners}
        for _ in range(args.rounds):  # interleaved: every variant once per round
            for variant, rn in runners.items():
                times[variant].append(rn.time(inputs, repeat=args.repeat, number=args.number))
        for variant, ts in times.items():
            dim, _, ratio = variant.partition("@")
            rows.append({"shape": name, "variant": variant, "dim": dim if ratio else "",
                         "ratio": float(ratio) if ratio else None,
                         "latency_ms": 1e3 * float(np.median(ts)),
                         "spread_ms": 1e3 * float(np.max(ts) - np.min(ts))})
        summary = summarize([r for r in rows if r["shape"] == name])
        print(f"{name:28s} cpu {summary['cpu_ms']:8.3f}  gpu {summary['gpu_ms']:8.3f}  "
              f"best split {summary['best_split']:9s} {summary['split_ms']:8.3f}  "
              f"speedup {summary['speedup']:.3f}", flush=True)
    result = {"pair": index["pair"], "rows": rows, "checks": checks,
              "summary": [summarize([r for r in rows if r["shape"] == n]) for n in by_shape],
              "command": " ".join(sys.argv)}
    Path(args.json).write_text(json.dumps(result, indent=1))
    print_table(result)


def summarize(rows: list[dict]) -> dict:
    by = {r["variant"]: r["latency_ms"] for r in rows}
    splits = {k: v for k, v in by.items() if "@" in k}
    best = min(splits, key=splits.get)
    single = min(by["cpu-only"], by["gpu-only"])
    return {"shape": rows[0]["shape"], "cpu_ms": by["cpu-only"], "gpu_ms": by["gpu-only"],
            "best_split": best, "split_ms": splits[best], "speedup": single / splits[best],
            "best_h": min((k for k in splits if k.startswith("H")), key=splits.get),
            "best_oc": min((k for k in splits if k.startswith("OC")), key=splits.get)}


def print_table(result: dict) -> None:
    print("\nshape                         cpu-only ms  gpu-only ms  best split      split ms"
          "  speedup vs best single")
    for s in result["summary"]:
        print(f"{s['shape']:28s} {s['cpu_ms']:11.3f} {s['gpu_ms']:12.3f}  {s['best_split']:10s}"
              f" {s['split_ms']:11.3f}  {s['speedup']:7.3f}")
    if result["checks"]:
        worst = max(c["rel_error"] for c in result["checks"])
        print(f"\nsplit vs GPU-only outputs on the real devices: worst relative error {worst:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--pair", default="h100", help="h100 (default) or a preset name")
    b.add_argument("--out", required=True)
    b.add_argument("--limit", type=int, help="only the first N shapes")
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--json", required=True)
    r.add_argument("--jobs", type=int, default=12)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--repeat", type=int, default=5)
    r.add_argument("--number", type=int, default=5)
    args = parser.parse_args()
    build(args) if args.cmd == "build" else run(args)


if __name__ == "__main__":
    main()
