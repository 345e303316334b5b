"""The CPU 1x1 GEMM in place against packed, kernel by kernel (``cpu_gemm_in_place``).

In place (where the image's pixels fill whole register tiles) the kernel reads the input
where it is and writes the output from its accumulators; packed, it copies the input into
pixel panels and writes a packed result that a pass of its own unpacks. This builds the 1x1
convs (+ bias + ReLU) of MobileNet-V2 and YOLO-V2 that run in place both ways, each reading
its weight packed at load as in a model, checks both against the unscheduled PrimFunc, and
times them interleaved with ``time_evaluator``, the caches flushed before each call as a
model's previous layers leave them (7 rounds of 30 calls, the median)::

    TVM_NUM_THREADS=2 python benchmarks/cpu_gemm_in_place.py --mcpu znver3 --cores 2 \
        -o benchmarks/results/cpu-gemm-in-place.json

``--run-pixels N`` builds the in-place kernel with runs of at most N pixels per task
(``tiling.cpu.IN_PLACE_RUN_PIXELS``; 16 on AVX2: one tile per task) against the same packed
kernel.

For a machine with only the TVM runtime (the GPU machine's CPU), ``--build DIR`` exports the
kernels instead of timing them, and ``--run DIR`` (runtime only) times them there and checks
the two kernels' outputs against each other::

    python benchmarks/cpu_gemm_in_place.py --mcpu sapphirerapids --cores 16 --build DIR
    TVM_NUM_THREADS=16 python benchmarks/cpu_gemm_in_place.py --run DIR -o OUT.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernel_ab  # noqa: E402

# (IC, OC, H = W): MobileNet-V2's 1x1 convs at 28x28 to 112x112, YOLO-V2's at 104 and 52
SHAPES = [(32, 16, 112), (16, 96, 112), (24, 144, 56), (144, 24, 56), (96, 24, 56),
          (32, 192, 28), (192, 32, 28), (128, 64, 104), (256, 128, 52)]
ROUNDS = 7


def kernel(func, target, in_place: bool):
    """The kernel that reads its weight packed (what a model with constant weights runs)."""
    from codl_tvm.schedules import prepack
    from codl_tvm.schedules.dispatch import schedule_func
    from codl_tvm.schedules.target_info import target_info
    from codl_tvm.tiling import KernelVariants, use_variants

    with use_variants(KernelVariants(cpu_gemm_in_place=in_place)), prepack.capture() as box:
        _, blocking, _ = schedule_func(func, target, target_info(target))
    return box["kernel"], blocking


def build(spec: dict, folder: Path | None) -> list[dict]:
    """Each shape's two kernels for the target ``spec``: built (and exported to ``folder`` if
    given), checked here (on this host's CPU where the target's is not runnable here)."""
    import tvm

    from codl_tvm.schedules import testing as T
    from codl_tvm.tiling import KernelVariants, use_variants

    target, cases = tvm.target.Target(spec), []
    for ic, oc, hw in SHAPES:
        func = T.with_target(T.conv2d_func((1, ic, hw, hw), (oc, ic, 1, 1), bias_relu=True),
                             target)
        case = {"ic": ic, "oc": oc, "hw": hw, "libs": {}, "tasks": {}, "rel_err": 0.0}
        for name, in_place in (("packed", False), ("in_place", True)):
            kern, blocking = kernel(func, target, in_place)
            with use_variants(KernelVariants(cpu_gemm_in_place=in_place)):
                case["rel_err"] = max(case["rel_err"], T.check_cpu(func, spec))
            lib = T.build(kern, target)
            if folder is not None:
                path = folder / f"{ic}-{oc}-{hw}-{name}.so"
                lib.export_library(str(path))
                lib = path.name
            case["libs"][name] = lib
            case["tasks"][name] = blocking.num_blocks
            case.setdefault("params", {})[name] = [[int(d) for d in p.shape]
                                                   for p in kern.params[:-1]]
        cases.append(case)
    return cases


def inputs(ic: int, oc: int, hw: int, shapes: list[list[int]], dev) -> list:
    """The same input, weight and bias for either kernel, the weight in the kernel's panels
    ``[OC/mr, IC, mr]`` (the two may block OC differently)."""
    import tvm

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1, ic, hw, hw)).astype("float32")
    w = rng.uniform(-1, 1, (oc, ic)).astype("float32")
    b = rng.uniform(-1, 1, (1, oc, 1, 1)).astype("float32")
    ocp, _, mr = shapes[1]
    padded = np.zeros((ocp * mr, ic), "float32")
    padded[:oc] = w
    panels = np.ascontiguousarray(padded.reshape(ocp, mr, ic).transpose(0, 2, 1))
    return [tvm.runtime.tensor(a, dev) for a in (x, panels, b)]


def time_cases(cases: list[dict], folder: Path | None) -> list[dict]:
    """Time each case's kernels interleaved; print and return the rows."""
    import tvm

    dev, rows = tvm.cpu(), []
    print("| IC->OC at HxW | packed us | in place us | in place / packed | rel err |")
    print("|---|---:|---:|---:|---:|")
    for case in cases:
        libs = {k: tvm.runtime.load_module(str(folder / v)) if folder is not None else v
                for k, v in case["libs"].items()}
        hw, oc = case["hw"], case["oc"]
        args_ = {k: inputs(case["ic"], oc, hw, case["params"][k], dev) for k in libs}
        outs = {k: tvm.runtime.empty((1, oc, hw, hw), "float32", dev) for k in libs}
        for k, lib in libs.items():
            lib["main"](*args_[k], outs[k])
        a, b = outs["packed"].numpy(), outs["in_place"].numpy()
        err = max(case["rel_err"], kernel_ab.rel_diff(a, b))
        us = kernel_ab.interleaved_us({k: (lib, [*args_[k], outs[k]]) for k, lib in libs.items()},
                                      ROUNDS)
        rows.append({"ic": case["ic"], "oc": oc, "hw": hw, "packed_us": us["packed"],
                     "in_place_us": us["in_place"], "ratio": us["in_place"] / us["packed"],
                     "rel_err": err, "tasks": case["tasks"]})
        print(f"| {case['ic']}->{oc} at {hw}x{hw} | {us['packed']:.1f} | {us['in_place']:.1f} | "
              f"{us['in_place'] / us['packed']:.2f} | {err:.1e} |")
    return rows


def main() -> None:
    p = kernel_ab.parser(__doc__)
    p.add_argument("--run-pixels", type=int,
                   help="in place: at most this many pixels per task (default: the rule's)")
    args = p.parse_args()
    if args.run_pixels is not None:
        from codl_tvm.tiling import cpu

        cpu.IN_PLACE_RUN_PIXELS = args.run_pixels
    kernel_ab.run(p, args, build, time_cases, ROUNDS, run_pixels=args.run_pixels)

if __name__ == "__main__":
    main()
