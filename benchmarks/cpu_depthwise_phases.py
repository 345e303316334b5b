"""The CPU's strided depthwise conv with a phased input against a strided one, kernel by
kernel (``cpu_depthwise_phases``).

Phased, each padded input row holds its even and odd columns apart, so every window column
loads whole vectors; strided, each input vector is assembled lane by lane. This builds
MobileNet-V2's depthwise convs (+ bias + ReLU; stride 2, and stride 1 as a control: the
variant changes nothing there but the pad's cut column loop), checks both builds against the
unscheduled PrimFunc, and times them interleaved with ``time_evaluator``, the caches flushed
before each call (7 rounds of 30 calls, the median)::

    TVM_NUM_THREADS=2 python benchmarks/cpu_depthwise_phases.py --mcpu znver3 --cores 2 \\
        -o benchmarks/results/cpu-depthwise-phases.json

For a machine with only the TVM runtime (the GPU machine's CPU), ``--build DIR`` exports the
kernels, and ``--run DIR`` (runtime only) times them there and checks the two builds'
outputs against each other::

    python benchmarks/cpu_depthwise_phases.py --mcpu sapphirerapids --cores 16 --build DIR
    TVM_NUM_THREADS=16 python benchmarks/cpu_depthwise_phases.py --run DIR -o OUT.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernel_ab  # noqa: E402

# (channels, input H = W, stride): MobileNet-V2's depthwise 3x3 convs, padding 1
SHAPES = [(96, 112, 2), (144, 56, 2), (192, 28, 2), (576, 14, 2),
          (32, 112, 1), (144, 56, 1), (384, 14, 1), (960, 7, 1)]
ROUNDS = 7
BUILDS = (("strided", False), ("phased", True))


def conv(c: int, hw: int, stride: int):
    from codl_tvm.schedules import testing as T

    return T.conv2d_func((1, c, hw, hw), (c, 1, 3, 3), strides=stride, padding=1, groups=c,
                         bias_relu=True)


def build(spec: dict, folder: Path | None) -> list[dict]:
    """Each shape's two builds for the target ``spec`` (exported to ``folder`` if given),
    checked against the unscheduled PrimFunc here."""
    import tvm

    from codl_tvm.schedules import testing as T
    from codl_tvm.tiling import KernelVariants, use_variants

    target, cases = tvm.target.Target(spec), []
    for c, hw, stride in SHAPES:
        func = conv(c, hw, stride)
        case = {"c": c, "hw": hw, "stride": stride, "libs": {}, "rel_err": 0.0}
        for name, phased in BUILDS:
            with use_variants(KernelVariants(cpu_depthwise_phases=phased)):
                case["rel_err"] = max(case["rel_err"], T.check_cpu(func, spec))
                lib = T.build(T.schedule(func, target), target)
            if folder is not None:
                path = folder / f"{c}-{hw}-{stride}-{name}.so"
                lib.export_library(str(path))
                lib = path.name
            case["libs"][name] = lib
        cases.append(case)
    return cases


def time_cases(cases: list[dict], folder: Path | None) -> list[dict]:
    """Time each case's builds interleaved; print and return the rows."""
    import tvm

    dev, rows = tvm.cpu(), []
    print("| channels at HxW, stride | strided us | phased us | phased / strided | rel err |")
    print("|---|---:|---:|---:|---:|")
    for case in cases:
        libs = {k: tvm.runtime.load_module(str(folder / v)) if folder is not None else v
                for k, v in case["libs"].items()}
        c, hw, stride = case["c"], case["hw"], case["stride"]
        rng = np.random.default_rng(0)
        args = [tvm.runtime.tensor(rng.uniform(-1, 1, s).astype("float32"), dev)
                for s in ((1, c, hw, hw), (c, 1, 3, 3), (1, c, 1, 1))]
        oh = (hw - 1) // stride + 1
        outs = {k: tvm.runtime.empty((1, c, oh, oh), "float32", dev) for k in libs}
        for k, lib in libs.items():
            lib["main"](*args, outs[k])
        a, b = outs["strided"].numpy(), outs["phased"].numpy()
        err = max(case["rel_err"], kernel_ab.rel_diff(a, b))
        us = kernel_ab.interleaved_us({k: (lib, [*args, outs[k]]) for k, lib in libs.items()},
                                      ROUNDS)
        ratio = us["phased"] / us["strided"]
        rows.append({"channels": c, "hw": hw, "stride": stride, "strided_us": us["strided"],
                     "phased_us": us["phased"], "ratio": ratio, "rel_err": err})
        print(f"| {c} at {hw}x{hw}, {stride} | {us['strided']:.1f} | {us['phased']:.1f} | "
              f"{ratio:.2f} | {err:.1e} |")
    return rows


def main() -> None:
    p = kernel_ab.parser(__doc__)
    kernel_ab.run(p, p.parse_args(), build, time_cases, ROUNDS)

if __name__ == "__main__":
    main()
