"""A kernel variant of the CPU's depthwise conv against the kernel without it, kernel by kernel
(the machinery of ``cpu_depthwise_phases.py`` and ``cpu_depthwise_unpack.py``, whose shapes and
variants it is given).

A shape is ``(channels, input H = W, stride)``: a 3x3 depthwise conv, padding 1, + bias +
ReLU. Each is built under each variant, checked against the unscheduled PrimFunc here, and
timed interleaved with ``time_evaluator``, the caches flushed before each call (7 rounds of 30
calls, the median); the builds' outputs are checked against each other where they run.
"""

from __future__ import annotations

from pathlib import Path

import kernel_ab
import numpy as np

ROUNDS = 7


def conv(c: int, hw: int, stride: int):
    from codl_tvm.schedules import testing as T

    return T.conv2d_func((1, c, hw, hw), (c, 1, 3, 3), strides=stride, padding=1, groups=c,
                         bias_relu=True)


def build(spec: dict, folder: Path | None, shapes: list, variants: dict) -> list[dict]:
    """Each shape's builds (label -> kernel variants changed) for the target ``spec``
    (exported to ``folder`` if given), checked against the unscheduled PrimFunc here."""
    import tvm

    from codl_tvm.schedules import testing as T
    from codl_tvm.tiling import use_variants

    target, cases = tvm.target.Target(spec), []
    for c, hw, stride in shapes:
        func = conv(c, hw, stride)
        case = {"c": c, "hw": hw, "stride": stride, "libs": {}, "rel_err": 0.0}
        for name, changes in variants.items():
            with use_variants(**changes):
                case["rel_err"] = max(case["rel_err"], T.check_cpu(func, spec))
                lib = T.build(T.schedule(func, target), target)
            if folder is not None:
                path = folder / f"{c}-{hw}-{stride}-{name}.so"
                lib.export_library(str(path))
                lib = path.name
            case["libs"][name] = lib
        cases.append(case)
    return cases


def time_cases(cases: list[dict], folder: Path | None, labels: tuple[str, str]) -> list[dict]:
    """Time each case's builds interleaved; print and return the rows (``labels``: the new
    build's, then the baseline's)."""
    import tvm

    new, old = labels
    dev, rows = tvm.cpu(), []
    print(f"| channels at HxW, stride | {old} us | {new} us | {new} / {old} | rel err |")
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
        err = max(case["rel_err"], kernel_ab.rel_diff(outs[old].numpy(), outs[new].numpy()))
        us = kernel_ab.interleaved_us({k: (lib, [*args, outs[k]]) for k, lib in libs.items()},
                                      ROUNDS)
        ratio = us[new] / us[old]
        rows.append({"channels": c, "hw": hw, "stride": stride, f"{old}_us": us[old],
                     f"{new}_us": us[new], "ratio": ratio, "rel_err": err})
        print(f"| {c} at {hw}x{hw}, {stride} | {us[old]:.1f} | {us[new]:.1f} | "
              f"{ratio:.2f} | {err:.1e} |")
    return rows


def main(doc: str, shapes: list, variants: dict) -> None:
    """The script's command line (``kernel_ab.parser``): ``variants`` maps labels to kernel
    variants changed, the new build's first."""
    labels = tuple(variants)

    def build_for(spec: dict, folder: Path | None) -> list[dict]:
        return build(spec, folder, shapes, variants)

    def time_for(cases: list[dict], folder: Path | None) -> list[dict]:
        return time_cases(cases, folder, labels)

    p = kernel_ab.parser(doc)
    kernel_ab.run(p, p.parse_args(), build_for, time_for, ROUNDS)
