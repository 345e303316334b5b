"""The CPU's GEMV reading its constant weight packed at load into panels
(``cpu_gemv_panels``, the default) against the streamed GEMV reading the ``(K, N)`` weight as
it is, kernel by kernel.

Each shape (M x K times K x N, + bias + ReLU) is built both ways, the panels' weight pass run
once on the weight, checked against the unscheduled PrimFunc, and timed interleaved with
``time_evaluator``, the caches flushed before each call (7 rounds of 30 calls, the
median)::

    TVM_NUM_THREADS=2 python benchmarks/cpu_gemv_panels.py --mcpu znver4 --cores 2 \\
        -o benchmarks/results/cpu-gemv-panels.json

For a machine with only the TVM runtime, ``--build DIR`` here and ``--run DIR`` there, as
``cpu_even_tiles.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernel_ab  # noqa: E402

# (M, K, N): MobileNet-V2's and ResNet-18's classifiers, VGG-16's last two dense layers at a
# quarter of their K, YOLO-V2-sized 1024 -> 125, BERT's pooler, two rows, odd small ones
SHAPES = [(1, 1280, 1000), (1, 512, 1000), (1, 1024, 4096), (1, 1024, 1000), (1, 1024, 125),
          (1, 768, 768), (2, 768, 768), (4, 256, 100), (1, 512, 37)]
ROUNDS = 7


def _func(m: int, k: int, n: int):
    from codl_tvm.schedules import testing as T

    return T.matmul_func(m, k, n, bias_relu=True)


def _panels(func, target) -> dict:
    """``{"kernel", "pack"}``: the panels' version of the matmul rule's kernel for ``target``
    and its weight pass (:mod:`codl_tvm.schedules.prepack`)."""
    from codl_tvm.schedules import prepack
    from codl_tvm.schedules.analysis import analyze
    from codl_tvm.schedules.dispatch import RULES
    from codl_tvm.schedules.target_info import target_info

    (row,) = [r for r in RULES if r.name == "cpu-matmul"]
    with prepack.capture() as box:
        row.apply(func, analyze(func), target, target_info(target), row.name)
    return dict(box)


def build(spec: dict, folder: Path | None) -> list[dict]:
    """Each shape's streamed kernel, and its panels' kernel and weight pass (exported to
    ``folder`` if given), the panels checked against the unscheduled PrimFunc here."""
    import tvm

    from codl_tvm.schedules import testing as T

    target, cases = tvm.target.Target(spec), []
    here = tvm.target.Target(T.runnable_here(spec))
    for m, k, n in SHAPES:
        func = T.with_target(_func(m, k, n), target)
        box = _panels(func, target)
        libs = {"streamed": T.build(T.schedule(func, target), target),
                "panels": T.build(box["kernel"], target), "pack": T.build(box["pack"], target)}
        case = {"mkn": [m, k, n], "packed": [int(d) for d in box["kernel"].params[1].shape],
                "rel_err": _check(T.with_target(func, here), here), "libs": libs}
        if folder is not None:
            for name, lib in libs.items():
                lib.export_library(str(folder / f"{m}-{k}-{n}-{name}.so"))
                case["libs"][name] = f"{m}-{k}-{n}-{name}.so"
        cases.append(case)
    return cases


def _check(func, here) -> float:
    """The panels' kernel on this host's CPU against the unscheduled PrimFunc."""
    from codl_tvm.schedules import testing as T

    box = _panels(func, here)
    args = T.random_args(func)
    want = T.run(T.build(func, here), func, args)
    got = _run_panels(T.build(box["kernel"], here), T.build(box["pack"], here),
                      [int(d) for d in box["kernel"].params[1].shape], args, want.shape)[-1]
    return T.rel_error(got.numpy(), want)


def _run_panels(kernel, pack, packed_shape, args, out_shape) -> list:
    """The panels' kernel's arguments (the weight packed by ``pack``), after one call."""
    import tvm

    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in args]
    packed = tvm.runtime.empty(packed_shape, "float32", dev)
    pack["main"](tensors[1], packed)
    call = [tensors[0], packed, *tensors[2:], tvm.runtime.empty(out_shape, "float32", dev)]
    kernel["main"](*call)
    return call


def time_cases(cases: list[dict], folder: Path | None) -> list[dict]:
    """Time each case's two kernels interleaved; print and return the rows."""
    import tvm

    dev, rows = tvm.cpu(), []
    print("| M x K x N | panels us | streamed us | panels / streamed | rel err |")
    print("|---|---:|---:|---:|---:|")
    for case in cases:
        libs = {k: tvm.runtime.load_module(str(folder / v)) if folder is not None else v
                for k, v in case["libs"].items()}
        m, k, n = case["mkn"]
        rng = np.random.default_rng(0)
        args = [rng.uniform(-1, 1, s).astype("float32") for s in ((m, k), (k, n), (1, n))]
        panels = _run_panels(libs["panels"], libs["pack"], case["packed"], args, (m, n))
        streamed = [tvm.runtime.tensor(a, dev) for a in args]
        streamed.append(tvm.runtime.empty((m, n), "float32", dev))
        libs["streamed"]["main"](*streamed)
        err = max(case["rel_err"],
                  kernel_ab.rel_diff(streamed[-1].numpy(), panels[-1].numpy()))
        us = kernel_ab.interleaved_us({"panels": (libs["panels"], panels),
                                       "streamed": (libs["streamed"], streamed)}, ROUNDS)
        ratio = us["panels"] / us["streamed"]
        rows.append({"m": m, "k": k, "n": n, "panels_us": us["panels"],
                     "streamed_us": us["streamed"], "ratio": ratio, "rel_err": err})
        print(f"| {m} x {k} x {n} | {us['panels']:.1f} | {us['streamed']:.1f} | {ratio:.2f} "
              f"| {err:.1e} |")
    return rows


def main() -> None:
    p = kernel_ab.parser(__doc__)
    kernel_ab.run(p, p.parse_args(), build, time_cases, ROUNDS)


if __name__ == "__main__":
    main()
