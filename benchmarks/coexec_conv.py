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
# GPU shares: rows, and channels in sixteenths (GPU kernels tile channels by 8 or 16)
RATIOS = {"H": (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.97),
          "OC": (0.5, 0.5625, 0.625, 0.6875, 0.75, 0.8125, 0.875, 0.9375)}
# shares also built with one stream for kernels and copies (``overlap=False``): the
# before/after of OverlapCopies
SERIAL_RATIOS = {"H": (0.7, 0.9), "OC": (0.6875, 0.875)}
SERIAL = "/one-stream"  # variant suffix
# shares whose two parts are also built alone, to measure what a split adds to its parts
PART_RATIOS = {"H": (0.7, 0.9), "OC": (0.6875, 0.875)}
PARTS = ("gpu-part:", "cpu-part:")  # variant prefixes
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
    """Variant name -> (plan, overlap)."""
    from codl_tvm import Plan

    plans = {"cpu-only": (Plan.single(mod, "cpu"), None),
             "gpu-only": (Plan.single(mod, "gpu"), None)}
    for dim in ("H", "OC"):
        for r in RATIOS[dim]:
            plans[f"{dim}@{r}"] = (Plan.uniform(mod, dim, r), None)
        for r in SERIAL_RATIOS[dim]:
            plans[f"{dim}@{r}{SERIAL}"] = (Plan.uniform(mod, dim, r), False)
    return plans


def part_modules(s: dict, dim: str, staging: list[dict]) -> dict | None:
    """The GPU and CPU parts of a split of ``s`` as convs of their own, from the shapes of
    the split's staging buffers (the CPU's input and output); None where they do not fit a
    stride-1 conv."""
    p, k = (s["kh"] - 1) // 2, s["kh"]
    (cpu_in, cpu_out) = (b["shape"] for b in staging if b["role"] == "cpu")
    if s["sh"] != 1:
        return None
    if dim == "OC":
        oc_cpu = cpu_out[1]
        return {"gpu": conv_module(dict(s, oc=s["oc"] - oc_cpu)),
                "cpu": conv_module(dict(s, oc=oc_cpu), seed=1)}
    rows_out = cpu_out[2]
    gpu_out = s["h"] - rows_out
    if cpu_in[2] + p - k + 1 != rows_out:
        return None
    return {"gpu": conv_module(dict(s, h=gpu_out + k - 1 - p), pads=(p, p, 0, p)),
            "cpu": conv_module(dict(s, h=cpu_in[2]), seed=1, pads=(0, p, p, p))}


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
    part, parts = (int(x) for x in args.shard.split("/"))
    manifest = []

    def export(s: dict, name: str, exe, keep: bool) -> None:
        path = out / shape_name(s) / name.replace("@", "_").replace("/", "_").replace(":", "_")
        exe.export(path, weights=keep)
        manifest.append({"shape": s, "name": shape_name(s), "variant": name,
                         "path": str(path.relative_to(out)), "checked": keep})

    for s in shapes[part::parts]:
        mod = codl_tvm.load_model(conv_module(s))
        keep = s is check
        for name, (plan, overlap) in variants(mod).items():
            t0 = time.time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exe = codl_tvm.compile(mod, pair, plan, overlap=overlap)
            if "@" in name and not exe.manifest["staging"]:
                continue  # the share leaves the CPU no rows: GPU-only under another name
            export(s, name, exe, keep)
            dim, _, ratio = name.partition("@")
            if (overlap is None and ratio and float(ratio) in PART_RATIOS[dim]
                    and exe.manifest["staging"]):
                mods = part_modules(s, dim, exe.manifest["staging"])
                for role, sub in (mods or {}).items():
                    sub = codl_tvm.load_model(sub)
                    part = codl_tvm.compile(sub, pair, codl_tvm.Plan.single(sub, role))
                    export(s, f"{role}-part:{name}", part, False)
            print(f"{shape_name(s):28s} {name:10s} {time.time() - t0:5.1f} s", flush=True)
    index = out / ("index.json" if parts == 1 else f"index-{part}.json")
    index.write_text(json.dumps({"pair": pair.to_json(), "runs": manifest}, indent=1))


def _warm(paths: list[str]) -> int:
    from codl_tvm import runtime

    for p in paths:
        runtime.load(p)
    return len(paths)


def copy_floor(sizes_mb: tuple[int, ...] = (1, 2, 8), repeat: int = 20) -> list[dict]:
    """TVM's copies between the GPU and pinned / pageable host memory (median us)."""
    import tvm

    from codl_tvm import runtime

    gpu, cpu = tvm.cuda(0), tvm.cpu(0)
    rows: list[dict] = []
    if not gpu.exist:
        return rows
    for mb in sizes_mb:
        n = mb << 18  # float32 elements
        dev_t = tvm.runtime.empty((n,), "float32", gpu)
        for memory in ("pinned", "pageable"):
            host = runtime.host_tensor([n], "float32", cpu, pinned=memory == "pinned")
            for direction, (src, dst) in (("d2h", (dev_t, host)), ("h2d", (host, dev_t))):
                ts = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    src.copyto(dst)
                    gpu.sync()
                    ts.append(time.perf_counter() - t0)
                us = 1e6 * float(np.median(ts))
                rows.append({"mb": mb, "memory": memory, "direction": direction, "us": us,
                             "gb_per_s": (n * 4) / us / 1e3})
    return rows


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
    by_shape: dict[str, list[dict]] = {}
    for r in index["runs"]:
        by_shape.setdefault(r["name"], []).append(r)
    for name, runs in by_shape.items():
        runners = {r["variant"]: runtime.load(root / r["path"]) for r in runs}
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
            dim, _, ratio = variant.removesuffix(SERIAL).partition(":")[-1].partition("@")
            rows.append({"shape": name, "variant": variant, "dim": dim if ratio else "",
                         "part": variant.partition(":")[0] if ":" in variant else None,
                         "ratio": float(ratio) if ratio else None,
                         "overlap": not variant.endswith(SERIAL),
                         "latency_ms": 1e3 * float(np.median(ts)),
                         "spread_ms": 1e3 * float(np.max(ts) - np.min(ts))})
        summary = summarize([r for r in rows if r["shape"] == name])
        print(f"{name:28s} cpu {summary['cpu_ms']:8.3f}  gpu {summary['gpu_ms']:8.3f}  "
              f"best split {summary['best_split']:9s} {summary['split_ms']:8.3f}  "
              f"speedup {summary['speedup']:.3f}", flush=True)
    floor = copy_floor()
    sms = int(args.sms) if args.sms.isdigit() else args.sms
    result = {"pair": index["pair"], "sms": sms, "variants": rows, "checks": checks,
              "copy_floor": floor, "command": " ".join(sys.argv)}
    result["rows"] = summaries(rows, {r["name"]: r["shape"] for r in index["runs"]}, floor)
    Path(args.json).write_text(json.dumps(result, indent=1))
    print_table(result)


def summaries(rows: list[dict], shapes: dict[str, dict], floor: list[dict]) -> list[dict]:
    out = []
    for name in dict.fromkeys(r["shape"] for r in rows):
        s = summarize([r for r in rows if r["shape"] == name])
        s.update(split_overhead(s, shapes[name], floor))
        out.append(s)
    return out


def report(args: argparse.Namespace) -> None:
    """Summaries of a result file again, without the variants whose artifacts (in
    ``--artifacts``, the folder ``run`` timed) split nothing: a share that leaves the CPU no
    rows builds GPU-only, which ``build`` no longer exports."""
    result = json.loads(Path(args.result).read_text())
    root = Path(args.artifacts)
    index = [r for p in sorted(root.glob("index*.json")) for r in json.loads(p.read_text())["runs"]]
    empty = {(r["name"], r["variant"]) for r in index
             if "@" in r["variant"] and ":" not in r["variant"] and not json.loads(
        (root / r["path"] / "manifest.json").read_text())["staging"]}
    result["variants"] = [r for r in result["variants"]
                          if (r["shape"], r["variant"]) not in empty]
    result["rows"] = summaries(result["variants"], {r["name"]: r["shape"] for r in index},
                               result["copy_floor"])
    Path(args.output).write_text(json.dumps(result, indent=1))
    print_table(result)


def summarize(rows: list[dict]) -> dict:
    """Best single processor and best (overlapped) split of one shape; overlapped / one-stream
    latency ratios."""
    by = {r["variant"]: r["latency_ms"] for r in rows}
    splits = {k: v for k, v in by.items() if "@" in k and SERIAL not in k and ":" not in k}
    serial = {k.removesuffix(SERIAL): by[k.removesuffix(SERIAL)] / v
              for k, v in by.items() if k.endswith(SERIAL)}
    best = min(splits, key=splits.get)
    single = min(by["cpu-only"], by["gpu-only"])
    return {"shape": rows[0]["shape"], "cpu_ms": by["cpu-only"], "gpu_ms": by["gpu-only"],
            "best_split": best, "split_ms": splits[best], "speedup": single / splits[best],
            "best_h": min((k for k in splits if k.startswith("H")), key=splits.get),
            "best_oc": min((k for k in splits if k.startswith("OC")), key=splits.get),
            "overlap_over_one_stream": serial,
            "ideal_ms": 1 / (1 / by["cpu-only"] + 1 / by["gpu-only"]),
            # what each split with measured parts adds to the slower of its parts
            "measured_overhead_us": {
                k: 1e3 * (v - max(by[f"gpu-part:{k}"], by[f"cpu-part:{k}"]))
                for k, v in splits.items() if f"gpu-part:{k}" in by and f"cpu-part:{k}" in by}}


def split_overhead(s: dict, shape: dict, floor: list[dict]) -> dict:
    """What the best split costs beyond its parts: split_ms - max(GPU part, CPU part + its
    copies). Measured where the split's parts were built alone (the CPU part's artifact moves
    its input and output through pinned memory, as the split does); else estimated, the
    parts scaled from the single-processor times by share and the copies at the pinned
    bandwidth of ``floor``."""
    gain = min(s["cpu_ms"], s["gpu_ms"]) - s["ideal_ms"]
    shares = {"ideal_gain_share": gain / min(s["cpu_ms"], s["gpu_ms"]),
              "gain_reached": ((min(s["cpu_ms"], s["gpu_ms"]) - s["split_ms"]) / gain
                               if gain > 0 else None)}
    if s["best_split"] in s["measured_overhead_us"]:
        return {"overhead_us": s["measured_overhead_us"][s["best_split"]],
                "overhead_from": "parts", **shares}
    dim, _, ratio = s["best_split"].partition("@")
    r = float(ratio)
    oh, ow = shape["h"] // shape["sh"], shape["w"] // shape["sw"]
    if dim == "H":
        rows_in = (1 - r) * oh * shape["sh"] + shape["kh"] - 1  # the CPU's rows and halo
        bytes_in = 4 * rows_in * shape["w"] * shape["ic"]
        bytes_out = 4 * (1 - r) * oh * ow * shape["oc"]
    else:
        bytes_in = 4 * shape["h"] * shape["w"] * shape["ic"]
        bytes_out = 4 * (1 - r) * shape["oc"] * oh * ow
    gbps = {f["direction"]: f["gb_per_s"] for f in floor if f["memory"] == "pinned"
            and f["mb"] == 8} or {"d2h": float("inf"), "h2d": float("inf")}  # no CUDA here
    copy_ms = (bytes_in / gbps["d2h"] + bytes_out / gbps["h2d"]) / 1e6
    parts_ms = max(s["gpu_ms"] * r, s["cpu_ms"] * (1 - r) + copy_ms)
    return {"overhead_us": 1e3 * (s["split_ms"] - parts_ms), "overhead_from": "estimate",
            **shares}


def print_table(result: dict) -> None:
    print(f"\nSMs: {result['sms']}")
    print("shape                         cpu-only ms  gpu-only ms  ideal ms  best split "
          "  split ms  speedup  gain reached  overhead us  overlap/one-stream (H@0.9, OC@0.875)")
    for s in result["rows"]:
        reached = s["gain_reached"]
        st = s["overlap_over_one_stream"]
        print(f"{s['shape']:28s} {s['cpu_ms']:11.3f} {s['gpu_ms']:12.3f} {s['ideal_ms']:9.3f}"
              f"  {s['best_split']:10s} {s['split_ms']:9.3f} {s['speedup']:8.3f} "
              f"{'-' if reached is None else f'{reached:12.0%}':>12s} {s['overhead_us']:11.0f}"
              f"{'*' if s['overhead_from'] == 'estimate' else ' '}"
              f" {st.get('H@0.9', float('nan')):.3f}, {st.get('OC@0.875', float('nan')):.3f}")
    print("(* estimated from the single-processor times; the rest measured against the parts)")
    print("\nmeasured overhead of each split over the slower of its parts (us):")
    for s in result["rows"]:
        cells = "  ".join(f"{k} {v:6.0f}" for k, v in s["measured_overhead_us"].items())
        print(f"{s['shape']:28s} {cells}")
    print("\ncopy floor (TVM copies, median us):")
    for f in result["copy_floor"]:
        print(f"  {f['mb']:2d} MB {f['memory']:8s} {f['direction']}: {f['us']:8.1f} us "
              f"({f['gb_per_s']:.1f} GB/s)")
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
    p.add_argument("--artifacts", required=True, help="the folder run timed (or its twin)")
    p.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    {"build": build, "run": run, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
