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

import kernel_ab  # noqa: E402

# (IC, OC, H = W): ResNet-18/34's stages (64 at 56, 128 at 28, 256 at 14, 512 at 7), VGG-16's
# 64-channel convs at 224 and 112, a 32->64 and a 64->128
SHAPES = [(64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7), (64, 64, 112),
          (64, 128, 56), (32, 64, 56), (64, 64, 28)]
RULES = ("cpu-conv2d-direct-nchwc", "cpu-conv2d-winograd")
ROUNDS = 7


def kernels(func, target, rule_name: str):
    """(kernel reading the packed weight, weight pass) of ``rule_name`` on ``func``."""
    from codl_tvm.schedules import prepack
    from codl_tvm.schedules.analysis import analyze
    from codl_tvm.schedules.dispatch import RULES as TABLE
    from codl_tvm.schedules.target_info import target_info

    (rule,) = [r for r in TABLE if r.name == rule_name]
    with prepack.capture() as box:
        rule.apply(func, analyze(func), target, target_info(target), rule.name)
    return box["kernel"], box["pack"]


def build(spec: dict, folder: Path | None) -> list[dict]:
    """Each shape's two kernels and weight passes for ``spec`` (exported to ``folder`` if
    given), each rule's kernel checked against the unscheduled PrimFunc here (built for this
    host's CPU where ``spec``'s is not runnable here)."""
    import tvm

    from codl_tvm.schedules import testing as T

    target, cases = tvm.target.Target(spec), []
    for ic, oc, hw in SHAPES:
        func = T.with_target(T.conv2d_func((1, ic, hw, hw), (oc, ic, 3, 3), padding=1,
                                           bias_relu=True), target)
        case = {"ic": ic, "oc": oc, "hw": hw, "libs": {}, "packed_shape": {}, "rel_err": 0.0}
        here = tvm.target.Target(T.runnable_here(spec))  # the target's CPU may not be this one
        for name in RULES:
            kern, pack = kernels(func, here, name)
            args = T.random_args(func)
            want = T.run(T.build(func, here), func, args)
            got = run_packed(T.build(kern, here), T.build(pack, here), kern, args, tvm.cpu())
            case["rel_err"] = max(case["rel_err"], T.rel_error(got, want))
            kern, pack = kernels(func, target, name)
            libs = (T.build(kern, target), T.build(pack, target))
            if folder is not None:
                stem = f"{ic}-{oc}-{hw}-{name}"
                libs[0].export_library(str(folder / f"{stem}.so"))
                libs[1].export_library(str(folder / f"{stem}-pack.so"))
                libs = (f"{stem}.so", f"{stem}-pack.so")
            case["libs"][name] = libs
            case["packed_shape"][name] = [int(d) for d in kern.params[1].shape]
        cases.append(case)
    return cases


def run_packed(lib, pack_lib, kern, args: list, dev, shape: list[int] | None = None):
    """``lib``'s output for ``args`` (x, w, b), its weight packed by ``pack_lib`` first."""
    import tvm

    shape = shape or [int(d) for d in kern.params[1].shape]
    w = tvm.runtime.tensor(args[1], dev)
    packed = tvm.runtime.empty(shape, "float32", dev)
    pack_lib["main"](w, packed)
    x, b = (tvm.runtime.tensor(a, dev) for a in (args[0], args[2]))
    out_shape = (1, args[1].shape[0], args[0].shape[2], args[0].shape[3])
    out = tvm.runtime.empty(out_shape, "float32", dev)
    lib["main"](x, packed, b, out)
    return out.numpy()


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
            w = tvm.runtime.empty(case["packed_shape"][name], "float32", dev)
            pack["main"](tvm.runtime.tensor(src[1], dev), w)
            out = tvm.runtime.empty((1, oc, hw, hw), "float32", dev)
            args = [tvm.runtime.tensor(src[0], dev), w, tvm.runtime.tensor(src[2], dev), out]
            lib["main"](*args)
            outs[name] = out.numpy()
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
