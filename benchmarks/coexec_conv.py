"""Co-execution of single conv layers: CPU-only, GPU-only, and H / OC splits at many ratios.

The mechanism end to end on a real CPU+GPU pair: every YOLO-V2 conv shape of
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
sys.path.insert(0, str(ROOT / "benchmarks"))
from coexec_summary import (  # noqa: E402 - the sibling module, after the path
    GPU_COPIES,
    KERNEL_SLICES,
    ONE_CHUNK,
    PYTHON_STREAMS,
    SERIAL,
    base_variant,
    print_table,
    summaries,
    summarize,
)
from copy_floors import block_copy_floor, copy_floor  # noqa: E402 - sibling, after the path

WORKLOADS = ROOT.parent / "shared" / "workloads" / "conv2d.csv"
# GPU shares: rows, and channels in sixteenths (GPU kernels tile channels by 8 or 16)
RATIOS = {"H": (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.97),
          "OC": (0.5, 0.5625, 0.625, 0.6875, 0.75, 0.8125, 0.875, 0.9375)}
# shares also built with one stream for kernels and copies (``overlap=False``): the
# before/after of OverlapCopies
SERIAL_RATIOS = {"H": (0.7, 0.9), "OC": (0.6875, 0.875)}
# splits are built with block copies (LowerSlicesToBlockCopies, the default on CUDA: the
# GPU's kernel on the whole tensors); these row shares also with slice and concat kernels
# (``block_copies=False``) and with copies within the GPU (``block_in_kernels=False``): the
# before/after (channel splits of batch 1 have no slice or concat to lower)
SPLIT_OPTIONS = {"block_copies": True}
KERNEL_SLICE_RATIOS = {"H": (0.7, 0.8, 0.9, 0.95), "OC": ()}
# row shares also built with the CPU's rows in one piece (``cpu_chunks=1``; the pair's
# default runs them in chunks, each uploaded while the next computes): the before/after
ONE_CHUNK_RATIOS = {"H": (0.6, 0.7, 0.8, 0.9), "OC": ()}
# shares whose two parts are also built alone, to measure what a split adds to its parts
PART_RATIOS = {"H": (0.7, 0.9), "OC": (0.6875, 0.875)}
PARTS = ("gpu-part:", "cpu-part:")  # variant prefixes
# splits also run with the Python stream functions (the same artifact, loaded again after
# ``streams.use("python")``): the before/after of the native ones
PYTHON_STREAMS_RATIOS = {"H": (0.8, 0.9, 0.95), "OC": (0.75, 0.8125, 0.875)}
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


def conv_module(s: dict, seed: int = 0, pads: tuple[int, int, int, int] | None = None):
    """conv + bias + leaky ReLU of shape ``s``; ``pads`` (top, left, bottom, right) defaults
    to SAME for the odd kernels of YOLO-V2 (stride 1)."""
    from tvm import relax
    from tvm.relax import op as rop

    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, s["ic"], s["h"], s["w"]), "float32"))
    p = (s["kh"] - 1) // 2
    pads = pads or (p, p, p, p)
    w = (rng.standard_normal((s["oc"], s["ic"], s["kh"], s["kw"])) /
         np.sqrt(s["ic"] * s["kh"] * s["kw"])).astype("float32")
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(rop.nn.conv2d(x, relax.const(w), strides=(s["sh"], s["sw"]),
                                      padding=pads))
            y = bb.emit(rop.add(y, relax.const(rng.standard_normal((1, s["oc"], 1, 1))
                                               .astype("float32"))))
            out = bb.emit_output(rop.nn.leakyrelu(y, 0.1))
        bb.emit_func_output(out)
    return bb.get()


def variants(mod) -> dict:
    """Variant name -> (plan, compile options other than the pair's defaults)."""
    from codl_tvm import Plan

    plans = {"cpu-only": (Plan.single(mod, "cpu"), {}),
             "gpu-only": (Plan.single(mod, "gpu"), {})}
    for dim in ("H", "OC"):
        for r in RATIOS[dim]:
            plans[f"{dim}@{r}"] = (Plan.uniform(mod, dim, r), SPLIT_OPTIONS)
        for r in SERIAL_RATIOS[dim]:
            plans[f"{dim}@{r}{SERIAL}"] = (Plan.uniform(mod, dim, r),
                                            {**SPLIT_OPTIONS, "overlap": False})
        for r in ONE_CHUNK_RATIOS[dim]:
            plans[f"{dim}@{r}{ONE_CHUNK}"] = (Plan.uniform(mod, dim, r),
                                              {**SPLIT_OPTIONS, "cpu_chunks": 1})
        for r in KERNEL_SLICE_RATIOS[dim]:
            plans[f"{dim}@{r}{KERNEL_SLICES}"] = (Plan.uniform(mod, dim, r),
                                                  {"block_copies": False})
            plans[f"{dim}@{r}{GPU_COPIES}"] = (Plan.uniform(mod, dim, r),
                                               {**SPLIT_OPTIONS, "block_in_kernels": False})
    return plans


def part_modules(s: dict, dim: str, staging: list[dict]) -> dict | None:
    """The GPU and CPU parts of a split of ``s`` as convs of their own, from the shapes of
    the split's staging buffers (the CPU's input and output); None where they do not fit a
    stride-1 conv."""
    p, k = (s["kh"] - 1) // 2, s["kh"]
    cpu = [b["shape"] for b in staging if b["role"] == "cpu"]  # inputs, then outputs
    if s["sh"] != 1 or len(cpu) % 2:
        return None
    if dim == "OC":
        oc_cpu = cpu[-1][1]
        return {"gpu": conv_module(dict(s, oc=s["oc"] - oc_cpu)),
                "cpu": conv_module(dict(s, oc=oc_cpu), seed=1)}
    # the CPU's part whole (a chunked split stages each chunk's rows): its output rows, and
    # its input rows with the halo above them
    rows_out = sum(b[2] for b in cpu[len(cpu) // 2:])
    gpu_out = s["h"] - rows_out
    return {"gpu": conv_module(dict(s, h=gpu_out + k - 1 - p), pads=(p, p, 0, p)),
            "cpu": conv_module(dict(s, h=rows_out + k - 1 - p), seed=1, pads=(0, p, p, p))}


def build(args: argparse.Namespace) -> None:
    import warnings

    import codl_tvm

    pair = (codl_tvm.DevicePair("x86-cuda", H100_CPU, H100_GPU) if args.pair == "h100"
            else codl_tvm.DevicePair.preset(args.pair))
    out = Path(args.out)
    every = yolo_shapes()
    shapes = every[: args.limit] if args.limit else every
    # the smallest weights: the shape whose split outputs are checked against GPU-only
    check = min(every, key=lambda s: s["ic"] * s["oc"] * s["kh"] * s["kw"])
    shard, shards = (int(x) for x in args.shard.split("/"))
    manifest = []

    def export(s: dict, name: str, exe, keep: bool) -> None:
        path = out / shape_name(s) / name.replace("@", "_").replace("/", "_").replace(":", "_")
        exe.export(path, weights=keep)
        manifest.append({"shape": s, "name": shape_name(s), "variant": name,
                         "path": str(path.relative_to(out)), "checked": keep})

    for s in shapes[shard::shards]:
        mod = codl_tvm.load_model(conv_module(s))
        keep = s is check
        for name, (plan, options) in variants(mod).items():
            t0 = time.time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exe = codl_tvm.compile(mod, pair, plan, **options)
            if "@" in name and not exe.manifest["staging"]:
                continue  # the share leaves the CPU no rows: GPU-only under another name
            export(s, name, exe, keep)
            dim, _, ratio = name.partition("@")
            if (options == SPLIT_OPTIONS and ratio and float(ratio) in PART_RATIOS[dim]
                    and exe.manifest["staging"]):
                mods = part_modules(s, dim, exe.manifest["staging"])
                for role, sub in (mods or {}).items():
                    sub = codl_tvm.load_model(sub)
                    part = codl_tvm.compile(sub, pair, codl_tvm.Plan.single(sub, role))
                    export(s, f"{role}-part:{name}", part, False)
            print(f"{shape_name(s):28s} {name:10s} {time.time() - t0:5.1f} s", flush=True)
    index = out / ("index.json" if shards == 1 else f"index-{shard}.json")
    index.write_text(json.dumps({"pair": pair.to_json(), "runs": manifest}, indent=1))


def _warm(paths: list[str]) -> int:
    from codl_tvm import runtime

    for p in paths:
        runtime.load(p)
    return len(paths)


def python_streams_twins(root: Path, runs: list[dict]) -> dict:
    """The splits of ``PYTHON_STREAMS_RATIOS`` loaded again with the Python stream functions
    (the VM looks its functions up when it is made), then the default restored."""
    from codl_tvm import runtime, streams

    chosen = [r for r in runs if _twinned(r["variant"])]
    if not chosen or streams.implementation()[0] == "python":
        return {}
    with streams.using("python"):
        return {r["variant"] + PYTHON_STREAMS: runtime.load(root / r["path"]) for r in chosen}


def _twinned(variant: str) -> bool:
    """A split (not a part, not a twin) at a share of ``PYTHON_STREAMS_RATIOS``."""
    dim, _, ratio = variant.partition("@")
    return (bool(ratio) and ":" not in variant and variant == base_variant(variant)
            and float(ratio) in PYTHON_STREAMS_RATIOS[dim])


def streams_in_use() -> dict:
    from codl_tvm import streams

    name, reason = streams.implementation()
    return {"implementation": name, "reason": reason}


def run(args: argparse.Namespace) -> None:
    from codl_tvm import runtime

    root = Path(args.dir)
    index = {"runs": []}
    for part in sorted(root.glob("index*.json")):
        doc = json.loads(part.read_text())
        index["pair"] = doc["pair"]
        index["runs"] += doc["runs"]
    os.environ.setdefault("CODL_CUDA_CACHE", "/tmp/codl-cuda-cache")
    paths = [str(root / r["path"]) for r in index["runs"]]
    t0 = time.time()
    chunks = [paths[i:: args.jobs] for i in range(args.jobs)]
    # spawn: a forked child cannot use CUDA once the parent has touched it
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        sum(pool.map(_warm, chunks))
    print(f"warmed {len(paths)} artifacts in {time.time() - t0:.0f} s", flush=True)
    rows, checks = [], []
    streams = streams_in_use()["implementation"]
    print(f"stream functions: {streams_in_use()}", flush=True)
    by_shape: dict[str, list[dict]] = {}
    for r in index["runs"]:
        by_shape.setdefault(r["name"], []).append(r)
    for name, runs in by_shape.items():
        runners = {r["variant"]: runtime.load(root / r["path"]) for r in runs}
        runners.update(python_streams_twins(root, runs))
        inputs = {v: rn.random_inputs(seed=1) for v, rn in runners.items()}  # parts: own
        if runs[0]["checked"]:
            (ref,) = runners["gpu-only"].run(inputs["gpu-only"])
            for variant, rn in runners.items():
                if ":" in variant:  # a part computes a piece of the output
                    continue
                (out,) = rn.run(inputs[variant])
                err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
                checks.append({"shape": name, "variant": variant, "rel_error": err})
        times: dict[str, list[float]] = {v: [] for v in runners}
        for _ in range(args.rounds):  # interleaved: every variant once per round
            for variant, rn in runners.items():
                times[variant].append(rn.time(inputs[variant], repeat=args.repeat,
                                              number=args.number))
        for variant, ts in times.items():
            dim, _, ratio = base_variant(variant).partition(":")[-1].partition("@")
            rows.append({"shape": name, "variant": variant, "dim": dim if ratio else "",
                         "part": variant.partition(":")[0] if ":" in variant else None,
                         "ratio": float(ratio) if ratio else None,
                         "overlap": not variant.endswith(SERIAL),
                         "block_copies": not variant.endswith(KERNEL_SLICES),
                         "block_in_kernels": not variant.endswith((KERNEL_SLICES, GPU_COPIES)),
                         "streams": "python" if variant.endswith(PYTHON_STREAMS) else streams,
                         "latency_ms": 1e3 * float(np.median(ts)),
                         "spread_ms": 1e3 * float(np.max(ts) - np.min(ts))})
        summary = summarize([r for r in rows if r["shape"] == name])
        print(f"{name:28s} cpu {summary['cpu_ms']:8.3f}  gpu {summary['gpu_ms']:8.3f}  "
              f"best split {summary['best_split']:9s} {summary['split_ms']:8.3f}  "
              f"speedup {summary['speedup']:.3f}", flush=True)
    floor = copy_floor()
    blocks = block_copy_floor()
    sms = int(args.sms) if args.sms.isdigit() else args.sms
    result = {"pair": index["pair"], "sms": sms, "streams": streams_in_use(),
              "variants": rows, "checks": checks,
              "copy_floor": floor, "block_copy_floor": blocks, "command": " ".join(sys.argv)}
    result["rows"] = summaries(rows, {r["name"]: r["shape"] for r in index["runs"]}, floor)
    Path(args.json).write_text(json.dumps(result, indent=1))
    print_table(result)


def report(args: argparse.Namespace) -> None:
    """Summaries of a result file again, without the variants whose artifacts (in
    ``--artifacts``, the folder ``run`` timed) split nothing: a share that leaves the CPU no
    rows builds GPU-only, which ``build`` no longer exports."""
    result = json.loads(Path(args.result).read_text())
    if args.artifacts:
        root = Path(args.artifacts)
        index = [r for p in sorted(root.glob("index*.json"))
                 for r in json.loads(p.read_text())["runs"]]
        empty = {(r["name"], r["variant"]) for r in index
                 if "@" in r["variant"] and ":" not in r["variant"] and not json.loads(
            (root / r["path"] / "manifest.json").read_text())["staging"]}
        result["variants"] = [r for r in result["variants"]
                              if (r["shape"], r["variant"]) not in empty]
        shapes = {r["name"]: r["shape"] for r in index}
    else:
        shapes = {shape_name(s): s for s in yolo_shapes()}
    result["rows"] = summaries(result["variants"], shapes, result["copy_floor"])
    Path(args.output).write_text(json.dumps(result, indent=1))
    print_table(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--pair", default="h100", help="h100 (default) or a preset name")
    b.add_argument("--out", required=True)
    b.add_argument("--limit", type=int, help="only the first N shapes")
    b.add_argument("--shard", default="0/1", help="build shapes i, i+n, ... (I/N) of them")
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--json", required=True)
    r.add_argument("--jobs", type=int, default=12)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--repeat", type=int, default=5)
    r.add_argument("--number", type=int, default=5)
    r.add_argument("--sms", default="all", help="SMs the GPU was held to (recorded)")
    p = sub.add_parser("report", help="re-summarize a result without variants that split nothing")
    p.add_argument("result")
    p.add_argument("--artifacts", help="the folder run timed (or its twin): drop the variants "
                   "whose artifacts split nothing")
    p.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    {"build": build, "run": run, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
