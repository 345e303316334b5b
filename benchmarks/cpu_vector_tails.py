"""The CPU kernels' write-out loops vectorised piece by piece (``cpu_vector_tails``, the
default) against the same kernels leaving those loops to LLVM, kernel by kernel.

Where the vector width does not divide an output row (7, 14, 28 columns on 16 lanes), LLVM
vectorised the loop around the write-out instead, with masked gathers and scatters on
AVX-512. This builds MobileNet-V2's 1x1 convs below 56x56 and its depthwise 3x3 convs, a
stride-2 stem, ResNet-18's and YOLO-V2's Winograd shapes (+ bias + ReLU) both ways, checks
each against the unscheduled PrimFunc, and times them interleaved with ``time_evaluator``,
the caches flushed before each call (7 rounds of 30 calls, the median); dense convs read
their weight packed at load as in a model::

    TVM_NUM_THREADS=2 python benchmarks/cpu_vector_tails.py --mcpu znver4 --cores 2 \\
        -o benchmarks/results/cpu-vector-tails.json

For a machine with only the TVM runtime, ``--build DIR`` here and ``--run DIR`` there, as
``cpu_even_tiles.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import conv_variant_ab  # noqa: E402
import kernel_ab  # noqa: E402

# (IC, OC, input H = W, K, stride), padding K // 2
DENSE = [(96, 24, 56, 1, 1), (144, 32, 28, 1, 1), (32, 192, 28, 1, 1), (192, 64, 14, 1, 1),
         (64, 384, 14, 1, 1), (384, 64, 14, 1, 1), (96, 576, 14, 1, 1), (576, 96, 14, 1, 1),
         (576, 160, 7, 1, 1), (160, 960, 7, 1, 1), (960, 160, 7, 1, 1), (320, 1280, 7, 1, 1),
         (1024, 125, 13, 1, 1), (3, 32, 224, 3, 2), (64, 64, 56, 3, 1), (256, 256, 14, 3, 1),
         (512, 512, 7, 3, 1), (256, 512, 13, 3, 1)]
# (channels, input H = W, stride): MobileNet-V2's depthwise 3x3 convs, padding 1
DEPTHWISE = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1),
             (192, 28, 2), (384, 14, 1), (576, 14, 1), (576, 14, 2), (960, 7, 1)]
VARIANTS = {"tails": {}, "llvm": {"cpu_vector_tails": False}}
LABELS = tuple(VARIANTS)
ROUNDS = 7


def depthwise(c: int, hw: int, stride: int):
    from codl_tvm.schedules import testing as T

    return T.conv2d_func((1, c, hw, hw), (c, 1, 3, 3), strides=stride, padding=1, groups=c,
                         bias_relu=True)


def build(spec: dict, folder: Path | None) -> list[dict]:
    """The dense convs' cases (``conv_variant_ab.build``), then the depthwise convs'."""
    import tvm

    from codl_tvm.schedules import testing as T
    from codl_tvm.tiling import use_variants

    cases = conv_variant_ab.build(spec, folder, DENSE, VARIANTS)
    target = tvm.target.Target(spec)
    for c, hw, stride in DEPTHWISE:
        func = depthwise(c, hw, stride)
        case = {"depthwise": [c, hw, stride], "libs": {}, "rel_err": 0.0}
        for name, changes in VARIANTS.items():
            with use_variants(**changes):
                case["rel_err"] = max(case["rel_err"], T.check_cpu(func, spec))
                lib = T.build(T.schedule(func, target), target)
            if folder is not None:
                lib.export_library(str(folder / f"dw-{c}-{hw}-{stride}-{name}.so"))
                lib = f"dw-{c}-{hw}-{stride}-{name}.so"
            case["libs"][name] = lib
        cases.append(case)
    return cases


def time_depthwise(cases: list[dict], folder: Path | None) -> list[dict]:
    import tvm

    dev, rows = tvm.cpu(), []
    a, b = LABELS
    print(f"\n| depthwise channels at HxW, stride | {a} us | {b} us | {a} / {b} | rel err |")
    print("|---|---:|---:|---:|---:|")
    for case in cases:
        libs = {k: tvm.runtime.load_module(str(folder / v)) if folder is not None else v
                for k, v in case["libs"].items()}
        c, hw, stride = case["depthwise"]
        rng = np.random.default_rng(0)
        args = [tvm.runtime.tensor(rng.uniform(-1, 1, s).astype("float32"), dev)
                for s in ((1, c, hw, hw), (c, 1, 3, 3), (1, c, 1, 1))]
        oh = (hw - 1) // stride + 1
        outs = {k: tvm.runtime.empty((1, c, oh, oh), "float32", dev) for k in libs}
        for k, lib in libs.items():
            lib["main"](*args, outs[k])
        err = max(case["rel_err"], kernel_ab.rel_diff(outs[b].numpy(), outs[a].numpy()))
        us = kernel_ab.interleaved_us({k: (lib, [*args, outs[k]]) for k, lib in libs.items()},
                                      ROUNDS)
        rows.append({"ic": c, "oc": c, "hw": hw, "k": 3, "stride": stride,
                     "rule": "depthwise-direct", f"{a}_us": us[a], f"{b}_us": us[b],
                     "ratio": us[a] / us[b], "rel_err": err})
        print(f"| {c} at {hw}x{hw}, {stride} | {us[a]:.1f} | {us[b]:.1f} | "
              f"{us[a] / us[b]:.2f} | {err:.1e} |")
    return rows


def time_cases(cases: list[dict], folder: Path | None) -> list[dict]:
    dense = [c for c in cases if "depthwise" not in c]
    rows = conv_variant_ab.time_cases(dense, folder, LABELS, ROUNDS)
    rows += time_depthwise([c for c in cases if "depthwise" in c], folder)
    ratios = [r["ratio"] for r in rows]
    print(f"\ngeometric mean {LABELS[0]} / {LABELS[1]}: "
          f"{float(np.exp(np.mean(np.log(ratios)))):.2f} over {len(rows)} kernels")
    return rows


def main() -> None:
    p = kernel_ab.parser(__doc__)
    kernel_ab.run(p, p.parse_args(), build, time_cases, ROUNDS)


if __name__ == "__main__":
    main()
