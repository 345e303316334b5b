"""The GPU matmul's kernels (``KernelVariants.gpu_matmul``) against PyTorch, shape by shape.

``dlight`` is TVM 0.27's DLight ``Matmul`` rule (what every GPU matmul of more than a GEMV's
rows ran before); the others are ``gpu-matmul-tiled`` (``schedules.gpu_matmul``: the GPU
conv's tiled GEMM) with each of the conv's tile tables, with the K loop's register prefetch
(``KernelVariants.gpu_prefetch``, the default) or, ``NAME/no-prefetch``, without. PyTorch runs
``torch.matmul`` (cuBLAS) and ``F.conv2d`` (cuDNN), fp32, TF32 off, in the same process.
Kernels are built here and timed there:

    python benchmarks/gpu_matmul_variants.py build -o .devcarry/gpu-matmul \
        --held-out --no-prefetch --convs --candidates                           # ~30 s
    # there (runtime-only TVM, torch)
    python benchmarks/gpu_matmul_variants.py run .devcarry/gpu-matmul --json $OUT/gm.json
    # here
    python benchmarks/gpu_matmul_variants.py report gm.json \
        -o benchmarks/results/gpu-matmul-variants.json

Shapes: BERT-base's dense layers (128 tokens) and attention (12 heads, 128 x 64), ViT-B/16's
(197 tokens), ConvNeXt-T's first and last MLPs ([1, H, W, C] rows); ``--held-out`` adds other
transformers' shapes, ``--convs`` ResNet and YOLO-V2 convs on the same GEMM (with and without
prefetch), ``--candidates`` trial tiles that are not in the library. Each time is the median
of 5 ``time_evaluator`` repeats of at least 20 ms; outputs are checked against PyTorch's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (name, batch axes, M, K, N): batch axes lead both operands (attention) or are () (dense)
SHAPES = [
    ("bert-qkvo", (), 128, 768, 768), ("bert-ffn1", (), 128, 768, 3072),
    ("bert-ffn2", (), 128, 3072, 768), ("bert-qk", (12,), 128, 64, 128),
    ("bert-pv", (12,), 128, 128, 64), ("vit-qkv", (), 197, 768, 2304),
    ("vit-ffn1", (), 197, 768, 3072), ("vit-ffn2", (), 197, 3072, 768),
    ("vit-qk", (12,), 197, 64, 197), ("convnext-s1-mlp1", (), 3136, 96, 384),
    ("convnext-s4-mlp2", (), 49, 3072, 768),
]
VARIANTS = ("dlight", "tiled", "tiled-64", "tiled-128", "tiled-nosplitk")
# shapes of other transformers, kept apart: what a tile choice made on the shapes above scores
# on shapes it was not chosen on (T5-small's, GPT-2-medium's, a 7B LLM's MLP at 64 tokens)
HELD_OUT = [
    ("t5s-ffn1", (), 256, 512, 2048), ("t5s-ffn2", (), 256, 2048, 512),
    ("gpt2m-qkv", (), 512, 1024, 3072), ("gpt2m-ffn2", (), 512, 4096, 1024),
    ("llm7b-ffn1", (), 64, 4096, 11008), ("llm7b-ffn2", (), 64, 11008, 4096),
]
# trial tiles, one table each ("any" shape, split-K on): built by --candidates only, they are
# not in the library's tables
CANDIDATES = {
    "try-128x128": (16, 8, 16, 8, 8), "try-64x128": (8, 8, 16, 8, 8),
    "try-64x64-r8": (8, 8, 8, 8, 8), "try-128x64-k16": (16, 8, 16, 4, 16),
}


# convs on the same tiled GEMM (``--convs``, to see ``gpu_prefetch`` there too): (name, input,
# weight, stride, padding); 3x3 stride-1 ones with IC >= 32 run the Winograd kernel's GEMMs
CONVS = [
    ("resnet-3x3-56", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    ("resnet-3x3-14", (1, 256, 14, 14), (256, 256, 3, 3), 1, 1),
    ("resnet-3x3-s2", (1, 128, 56, 56), (256, 128, 3, 3), 2, 1),
    ("resnet50-1x1-56", (1, 64, 56, 56), (256, 64, 1, 1), 1, 0),
    ("resnet50-1x1-7", (1, 512, 7, 7), (2048, 512, 1, 1), 1, 0),
    ("yolo-3x3-13", (1, 1024, 13, 13), (1024, 1024, 3, 3), 1, 1),
    ("yolo-3x3-104", (1, 64, 104, 104), (128, 64, 3, 3), 1, 1),
]


def _conv_func(x: tuple[int, ...], w: tuple[int, ...], stride: int, pad: int):
    from codl_tvm.schedules import testing

    return testing.conv2d_func(x, w, strides=stride, padding=pad)


def _func(batch: tuple[int, ...], m: int, k: int, n: int):
    from tvm import te

    a = te.placeholder((*batch, m, k), name="A")
    b = te.placeholder(((*batch, k, n) if batch else (k, n)), name="B")
    r = te.reduce_axis((0, k), name="k")

    def body(*ix):
        g = ix[:-2]
        return te.sum(a[(*g, ix[-2], r)] * b[(*g, r, ix[-1]) if batch else (r, ix[-1])], axis=r)

    return te.create_prim_func([a, b, te.compute((*batch, m, n), body, name="C")])


def build(args: argparse.Namespace) -> int:
    import tvm

    from codl_tvm import tiling
    from codl_tvm.schedules.dispatch import schedule_func
    from codl_tvm.schedules.target_info import target_info

    target = tvm.target.Target({"kind": "cuda", "arch": args.arch}, host={"kind": "llvm"})
    out = Path(args.output)
    if out.exists():  # a sweep writes a folder of its own; nothing of yours is replaced
        raise SystemExit(f"{out} exists; give build a new folder")
    out.mkdir(parents=True)
    variants = list(VARIANTS)
    if args.candidates:
        for name, dims in CANDIDATES.items():
            tiling.VARIANTS[name] = (tiling.ShapeClass("any", tiling.Tile(*dims)),)
            variants.append(name)
    rows = []
    if args.no_prefetch:
        variants += [f"{v}/no-prefetch" for v in ("tiled", "tiled-64")]
    jobs = [(name, lambda b=batch, m=m, k=k, n=n: _func(b, m, k, n),
             {"batch": list(batch), "m": m, "k": k, "n": n}, variants)
            for name, batch, m, k, n in SHAPES + (HELD_OUT if args.held_out else [])]
    jobs += [(name, lambda x=x, w=w, s=stride, p=pad: _conv_func(x, w, s, p),
              {"conv": {"x": x, "w": w, "stride": stride, "pad": pad}},
              ["tiled", "tiled/no-prefetch"])
             for name, x, w, stride, pad in (CONVS if args.convs else [])]
    for name, make, shape, names in jobs:
        for variant in names:
            table, _, off = variant.partition("/")
            with tiling.use_variants(gpu_matmul=table, gpu_prefetch=not off):
                func, blocking, _ = schedule_func(make(), target, target_info(target))
            lib = f"{name}.{variant.replace('/', '.')}.so"
            func = func.with_attr("global_symbol", "main").with_attr("target", target)
            tvm.compile(tvm.IRModule({"main": func}), target=target).export_library(
                str(out / lib))
            rows.append({"shape": name, **shape, "variant": variant,
                         "algorithm": blocking.algorithm, "grid": blocking.grid, "lib": lib})
            print(f"{name:18} {variant:15} {blocking.algorithm}", flush=True)
    (out / "manifest.json").write_text(json.dumps({"arch": args.arch, "rows": rows}, indent=1))
    return 0


def _torch(row: dict, a: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray]:
    """(PyTorch's ms per call, its output) of the row's op: ``torch.matmul`` or cuDNN's conv
    (fp32, TF32 off)."""
    import torch
    import torch.nn.functional as F

    ta, tb = (torch.from_numpy(x).cuda() for x in (a, b))
    conv = row.get("conv")
    if conv:
        def call():
            return F.conv2d(ta, tb, stride=conv["stride"], padding=conv["pad"])
    else:
        def call():
            return torch.matmul(ta, tb)
    for _ in range(3):
        out = call()
    torch.cuda.synchronize()
    reps, times = 20, []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return float(np.median(times)), out.cpu().numpy()


def _flop(row: dict) -> int:
    if "conv" in row:
        (n, c, h, w), (o, _, kh, kw) = row["conv"]["x"], row["conv"]["w"]
        s, p = row["conv"]["stride"], row["conv"]["pad"]
        oh, ow = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
        return 2 * n * o * oh * ow * c * kh * kw
    return 2 * math.prod(row["batch"] or (1,)) * row["m"] * row["k"] * row["n"]


def run(args: argparse.Namespace) -> int:
    import torch
    import tvm

    from codl_tvm import runtime

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    if not runtime.enable_cuda():
        print("no CUDA device", file=sys.stderr)
        return 1
    folder = Path(args.artifacts)
    doc = json.loads((folder / "manifest.json").read_text())
    dev, rows = tvm.cuda(0), []
    ref: dict[str, tuple[float, np.ndarray]] = {}
    for row in doc["rows"]:
        rng = np.random.default_rng(sum(map(ord, row["shape"])))  # one input per shape
        if "conv" in row:
            a = rng.standard_normal(row["conv"]["x"]).astype("float32")
            b = rng.standard_normal(row["conv"]["w"]).astype("float32")
        else:
            batch, m, k, n = tuple(row["batch"]), row["m"], row["k"], row["n"]
            a = rng.standard_normal((*batch, m, k)).astype("float32")
            b = rng.standard_normal((*batch, k, n) if batch else (k, n)).astype("float32")
        if row["shape"] not in ref:
            ref[row["shape"]] = _torch(row, a, b)
        t_ms, want = ref[row["shape"]]
        lib = tvm.runtime.load_module(str(folder / row["lib"]))
        ta, tb = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
        tc = tvm.runtime.empty(want.shape, "float32", dev)
        ev = lib.time_evaluator("main", dev, number=1, repeat=5, min_repeat_ms=20)
        ms = float(np.median(ev(ta, tb, tc).results)) * 1e3
        err = float(np.abs(tc.numpy() - want).max() / np.abs(want).max())
        rows.append(row | {"ms": ms, "torch_ms": t_ms, "rel_err": err,
                           "gflops": _flop(row) / ms / 1e6})
        print(f"{row['shape']:18} {row['variant']:15} {ms:8.4f} ms  torch "
              f"{t_ms:8.4f} ms  err {err:.1e}", flush=True)
    result = {"gpu": torch.cuda.get_device_name(0), "arch": doc["arch"],
              "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def report(args: argparse.Namespace) -> int:
    doc = json.loads(Path(args.file).read_text())
    by_shape: dict[str, dict[str, dict]] = {}
    for r in doc["rows"]:
        by_shape.setdefault(r["shape"], {})[r["variant"]] = r
    print(f"{doc['gpu']}: ms per call (torch / variant in brackets)")
    names = list(dict.fromkeys(r["variant"] for r in doc["rows"]))
    print(f"| shape | torch | {' | '.join(names)} | best tiled / dlight |")
    print("|---|---:|" + "---:|" * len(names) + "---:|")
    for shape, v in by_shape.items():
        t = next(iter(v.values()))["torch_ms"]
        cells = [f"{v[x]['ms']:.4f} ({t / v[x]['ms']:.2f})" if x in v else "-" for x in names]
        tiled = [v[x]["ms"] for x in names if x != "dlight" and x in v]
        gain = v["dlight"]["ms"] / min(tiled) if tiled and "dlight" in v else float("nan")
        print(f"| {shape} | {t:.4f} | {' | '.join(cells)} | {gain:.2f} |")
    if args.output:
        Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="kernels for every shape and variant (here)")
    b.add_argument("-o", "--output", required=True, help="a new folder")
    b.add_argument("--arch", default="sm_90")
    b.add_argument("--candidates", action="store_true", help="also the trial tiles")
    b.add_argument("--held-out", action="store_true", help="also the held-out shapes")
    b.add_argument("--convs", action="store_true",
                   help="also convs, with and without KernelVariants.gpu_prefetch")
    b.add_argument("--no-prefetch", action="store_true",
                   help="also tiled and tiled-64 with KernelVariants.gpu_prefetch off")
    r = sub.add_parser("run", help="time them beside torch.matmul (there)")
    r.add_argument("artifacts")
    r.add_argument("--json", required=True)
    t = sub.add_parser("report", help="print the table; -o keeps the file")
    t.add_argument("file")
    t.add_argument("-o", "--output")
    args = p.parse_args()
    return {"build": build, "run": run, "report": report}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
