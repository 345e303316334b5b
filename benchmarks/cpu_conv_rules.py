"""The CPU's direct NCHWc conv against its Winograd F(2x2, 3x3), kernel by kernel, on 3x3
stride-1 convs on both sides of the dispatch's Winograd rule (``tiling.winograd_wins``).

Each shape (+ bias + ReLU) is built with both rules, each reading its weight packed at load
as in a model (the rule's weight pass run once on the weight), checked against the
unscheduled PrimFunc, and timed interleaved with ``time_evaluator``, the caches flushed
before each call (7 rounds of 30 calls, the median)::

    TVM_NUM_THREADS=2 python benchmarks/cpu_conv_rules.py --mcpu znver3 --cores 2 \\
        -o benchmarks/results/cpu-conv-rules.json

For a machine with only the TVM runtime (the GPU machine's CPU), ``--build DIR`` exports the
kernels and weight passes, and ``--run DIR`` (runtime only) times them there and checks the
two rules' outputs against each other::

    python benchmarks/cpu_conv_rules.py --mcpu sapphirerapids --cores 16 --build DIR
    TVM_NUM_THREADS=16 python benchmarks/cpu_conv_rules.py --run DIR -o OUT.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import conv_variant_ab  # noqa: E402
import kernel_ab  # noqa: E402

# (IC, OC, H = W): ResNet-18/34's stages (64 at 56, 128 at 28, 256 at 14, 512 at 7), VGG-16's
# 64-channel convs at 224 and 112, a 32->64 and a 64->128
SHAPES = [(64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7), (64, 64, 112),
          (64, 128, 56), (32, 64, 56), (64, 64, 28)]
RULES = ("cpu-conv2d-direct-nchwc", "cpu-conv2d-winograd")
ROUNDS = 7


def build(spec: dict, folder: Path | None) -> list[dict]:
    """Each shape's two kernels and weight passes for ``spec`` (exported to ``folder`` if
    given), each rule's kernel checked against the unscheduled PrimFunc here (built for this
    host's CPU where ``spec``'s is not runnable here)."""
    import tvm

    from codl_tvm.schedules import testing as T

    target, cases = tvm.target.Target(spec), []
    here = tvm.target.Target(T.runnable_here(spec))
    for ic, oc, hw in SHAPES:
        func = T.with_target(T.conv2d_func((1, ic, hw, hw), (oc, ic, 3, 3), padding=1,
                                           bias_relu=True), target)
        case = {"ic": ic, "oc": oc, "hw": hw, "libs": {}, "shapes": {}, "rel_err": 0.0}
        args = T.random_args(func)
        want = T.run(T.build(func, here), func, args)
        for name in RULES:
            libs, case["shapes"][name], _, err = conv_variant_ab.checked_kernel(
                func, spec, args, want, {}, rule=name)
            case["rel_err"] = max(case["rel_err"], err)
            case["libs"][name] = conv_variant_ab.export(libs, folder, f"{ic}-{oc}-{hw}-{name}")
        cases.append(case)
    return cases


def time_cases(cases: list[dict], folder: Path | None) -> list[dict]:
    """Time each case's kernels interleaved; print and return the rows."""
    import tvm

    dev, rows = tvm.cpu(), []
    print("| IC->OC at HxW | direct us | Winograd us | Winograd / direct | rel err |")
    print("|---|---:|---:|---:|---:|")
    for case in cases:
        ic, oc, hw = case["ic"], case["oc"], case["hw"]
        rng = np.random.default_rng(0)
        src = [rng.uniform(-1, 1, s).astype("float32")
               for s in ((1, ic, hw, hw), (oc, ic, 3, 3), (1, oc, 1, 1))]
        calls, outs = {}, {}
        for name in RULES:
            lib, pack = case["libs"][name]
            if folder is not None:
                lib, pack = (tvm.runtime.load_module(str(folder / f)) for f in (lib, pack))
            args = conv_variant_ab.call_args(case["shapes"][name], pack, src, dev)
            lib["main"](*args)
            outs[name] = args[-1].numpy()
            calls[name] = (lib, args)
        a, b = outs[RULES[0]], outs[RULES[1]]
        err = max(case["rel_err"], kernel_ab.rel_diff(a, b))
        us = kernel_ab.interleaved_us(calls, ROUNDS)
        d, w_ = us[RULES[0]], us[RULES[1]]
        rows.append({"ic": ic, "oc": oc, "hw": hw, "direct_us": d, "winograd_us": w_,
                     "ratio": w_ / d, "rel_err": err})
        print(f"| {ic}->{oc} at {hw}x{hw} | {d:.1f} | {w_:.1f} | {w_ / d:.2f} | {err:.1e} |")
    return rows


def main() -> None:
    p = kernel_ab.parser(__doc__)
    p.add_argument("--shapes", help="IC-OC-HW,... instead of the default shapes")
    args = p.parse_args()
    if args.shapes:
        SHAPES[:] = [tuple(int(v) for v in s.split("-")) for s in args.shapes.split(",")]
    kernel_ab.run(p, args, build, time_cases, ROUNDS)

if __name__ == "__main__":
    main()
