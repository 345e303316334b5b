"""The CPU's conv kernels with register tiles shared evenly (``cpu_even_tiles``, the
default) against the same kernels with their last tile padded, kernel by kernel, on convs
whose output columns (direct conv) or 2x2 tiles (Winograd) the change re-tiles.

Each shape (+ bias + ReLU) is built with the kernel the dispatch picks, both ways, each
reading its weight packed at load as in a model (the rule's weight pass run once), checked
against the unscheduled PrimFunc, and timed interleaved with ``time_evaluator``, the caches
flushed before each call (7 rounds of 30 calls, the median)::

    TVM_NUM_THREADS=2 python benchmarks/cpu_even_tiles.py --mcpu znver3 --cores 2 \\
        -o benchmarks/results/cpu-even-tiles.json

For a machine with only the TVM runtime, ``--build DIR`` here and ``--run DIR`` there::

    python benchmarks/cpu_even_tiles.py --mcpu sapphirerapids --cores 16 --build DIR
    TVM_NUM_THREADS=16 python benchmarks/cpu_even_tiles.py --run DIR -o OUT.json

``--shapes IC-OC-HW-K-S,...`` (input H = W, K x K window, stride S, padding K // 2) replaces
the default shapes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernel_ab  # noqa: E402

# (IC, OC, input H = W, K, stride): ResNet-18's stride-2 3x3 and 1x1 convs to 14x14 and 7x7
# (direct; 6 columns a tile on 16 registers), its 3x3 convs at 7x7 and 14x14 and YOLO-V2's
# at 13x13 and 26x26 (Winograd; 14 tiles a block on 32 registers), a 3x3 32->64 at 56x56
# (direct; re-tiled nowhere: the control)
SHAPES = [(128, 256, 28, 3, 2), (256, 512, 14, 3, 2), (128, 256, 28, 1, 2), (256, 512, 14, 1, 2),
          (512, 512, 7, 3, 1), (256, 256, 14, 3, 1), (1024, 1024, 13, 3, 1),
          (512, 512, 26, 3, 1), (32, 64, 56, 3, 1)]
VARIANTS = {"even": {}, "padded": {"cpu_even_tiles": False}}
ROUNDS = 7


def conv(shape: tuple[int, ...]):
    from codl_tvm.schedules import testing as T

    ic, oc, hw, k, s = shape
    return T.conv2d_func((1, ic, hw, hw), (oc, ic, k, k), strides=(s, s), padding=(k // 2,) * 4,
                         bias_relu=True)


def kernels(func, target, changes: dict):
    """(kernel reading the packed weight, weight pass, rule) the dispatch gives ``func``
    under the kernel variants ``changes``."""
    from codl_tvm.schedules import blocking_of, prepack
    from codl_tvm.schedules import testing as T
    from codl_tvm.schedules.analysis import analyze
    from codl_tvm.schedules.dispatch import RULES
    from codl_tvm.schedules.target_info import target_info
    from codl_tvm.tiling import use_variants

    with use_variants(**changes):
        name = blocking_of(T.schedule(func, target)).rule
        (rule,) = [r for r in RULES if r.name == name]
        with prepack.capture() as box:
            rule.apply(func, analyze(func), target, target_info(target), rule.name)
    return box["kernel"], box["pack"], name


def call_args(shapes: dict, pack_lib, src: list, dev) -> list:
    """(x, packed weight, bias, output) for a kernel of ``shapes`` (its packed weight's and
    output's), the weight packed by ``pack_lib``."""
    import tvm

    w = tvm.runtime.empty(shapes["packed"], "float32", dev)
    pack_lib["main"](tvm.runtime.tensor(src[1], dev), w)
    out = tvm.runtime.empty(shapes["out"], "float32", dev)
    return [tvm.runtime.tensor(src[0], dev), w, tvm.runtime.tensor(src[2], dev), out]


def shapes_of(kern) -> dict:
    return {k: [int(d) for d in kern.params[i].shape] for k, i in (("packed", 1), ("out", -1))}


def build(spec: dict, folder: Path | None) -> list[dict]:
    """Each shape's kernels and weight passes both ways for ``spec`` (exported to ``folder``
    if given), each checked against the unscheduled PrimFunc here (built for this host's CPU
    where ``spec``'s is not runnable here)."""
    import tvm

    from codl_tvm.schedules import testing as T

    target, cases = tvm.target.Target(spec), []
    here = tvm.target.Target(T.runnable_here(spec))  # the target's CPU may not be this one
    for shape in SHAPES:
        func = T.with_target(conv(shape), target)
        case = {"shape": list(shape), "libs": {}, "rule": {}, "shapes": {}, "rel_err": 0.0}
        args = T.random_args(func)
        want = T.run(T.build(func, here), func, args)
        for name, changes in VARIANTS.items():
            kern, pack, _ = kernels(func, here, changes)
            a = call_args(shapes_of(kern), T.build(pack, here), args, tvm.cpu())
            T.build(kern, here)["main"](*a)
            case["rel_err"] = max(case["rel_err"], T.rel_error(a[-1].numpy(), want))
            kern, pack, case["rule"][name] = kernels(func, target, changes)
            libs = (T.build(kern, target), T.build(pack, target))
            if folder is not None:
                stem = "-".join(map(str, shape)) + f"-{name}"
                libs[0].export_library(str(folder / f"{stem}.so"))
                libs[1].export_library(str(folder / f"{stem}-pack.so"))
                libs = (f"{stem}.so", f"{stem}-pack.so")
            case["libs"][name], case["shapes"][name] = libs, shapes_of(kern)
        cases.append(case)
    return cases


def time_cases(cases: list[dict], folder: Path | None) -> list[dict]:
    """Time each case's two kernels interleaved; print and return the rows."""
    import tvm

    dev, rows = tvm.cpu(), []
    print("| IC->OC, input HxW, KxK / S | rule | even us | padded us | even / padded | rel err |")
    print("|---|---|---:|---:|---:|---:|")
    for case in cases:
        shape, calls, outs = tuple(case["shape"]), {}, {}
        ic, oc, hw, k, s = shape
        rng = np.random.default_rng(0)
        src = [rng.uniform(-1, 1, d).astype("float32")
               for d in ((1, ic, hw, hw), (oc, ic, k, k), (1, oc, 1, 1))]
        for name in VARIANTS:
            lib, pack = case["libs"][name]
            if folder is not None:
                lib, pack = (tvm.runtime.load_module(str(folder / f)) for f in (lib, pack))
            args = call_args(case["shapes"][name], pack, src, dev)
            lib["main"](*args)
            outs[name], calls[name] = args[-1].numpy(), (lib, args)
        err = max(case["rel_err"], kernel_ab.rel_diff(outs["padded"], outs["even"]))
        us = kernel_ab.interleaved_us(calls, ROUNDS)
        rule = case["rule"]["even"].removeprefix("cpu-conv2d-")
        rows.append({"ic": ic, "oc": oc, "hw": hw, "k": k, "stride": s, "rule": rule,
                     "even_us": us["even"], "padded_us": us["padded"],
                     "ratio": us["even"] / us["padded"], "rel_err": err})
        print(f"| {ic}->{oc}, {hw}x{hw}, {k}x{k} / {s} | {rule} | {us['even']:.1f} "
              f"| {us['padded']:.1f} | {us['even'] / us['padded']:.2f} | {err:.1e} |")
    return rows


def main() -> None:
    p = kernel_ab.parser(__doc__)
    p.add_argument("--shapes", help="IC-OC-HW-K-S,... instead of the default shapes")
    args = p.parse_args()
    if args.shapes:
        SHAPES[:] = [tuple(int(v) for v in s.split("-")) for s in args.shapes.split(",")]
    kernel_ab.run(p, args, build, time_cases, ROUNDS)


if __name__ == "__main__":
    main()
