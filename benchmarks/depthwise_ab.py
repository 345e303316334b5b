"""Depthwise 3x3 convs (+ bias + ReLU, padding 1) built under two sets of kernel variants and
timed against each other, kernel by kernel: the depthwise side of ``conv_variant_ab.py``
(``cpu_depthwise_phases.py``, ``cpu_vector_tails.py``). A shape is ``(channels, input H = W,
stride)``; the weight is a parameter (the depthwise kernel packs none)."""

from __future__ import annotations

from pathlib import Path

import kernel_ab
import numpy as np


def conv(c: int, hw: int, stride: int):
    from codl_tvm.schedules import testing as T

    return T.conv2d_func((1, c, hw, hw), (c, 1, 3, 3), strides=stride, padding=1, groups=c,
                         bias_relu=True)


def build(spec: dict, folder: Path | None, shapes: list, variants: dict) -> list[dict]:
    """Each shape built under each of ``variants`` (label -> kernel variants changed) for
    ``spec`` (exported to ``folder`` if given), checked against the unscheduled PrimFunc here."""
    import tvm

    from codl_tvm.schedules import testing as T
    from codl_tvm.tiling import use_variants

    target, cases = tvm.target.Target(spec), []
    for c, hw, stride in shapes:
        func = conv(c, hw, stride)
        case = {"depthwise": [c, hw, stride], "libs": {}, "rel_err": 0.0}
        for name, changes in variants.items():
            with use_variants(**changes):
                case["rel_err"] = max(case["rel_err"], T.check_cpu(func, spec))
                lib = T.build(T.schedule(func, target), target)
            if folder is not None:
                path = folder / f"dw-{c}-{hw}-{stride}-{name}.so"
                lib.export_library(str(path))
                lib = path.name
            case["libs"][name] = lib
        cases.append(case)
    return cases


def time_cases(cases: list[dict], folder: Path | None, labels: tuple[str, str],
               rounds: int) -> list[dict]:
    """Time each case's two builds (``labels``: the variant, the baseline) interleaved, the
    caches flushed before each call; check their outputs against each other; print and
    return the rows."""
    import tvm

    dev, rows = tvm.cpu(), []
    a, b = labels
    print(f"| depthwise channels at HxW, stride | {a} us | {b} us | {a} / {b} | rel err |")
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
                                      rounds)
        rows.append({"channels": c, "hw": hw, "stride": stride, f"{b}_us": us[b],
                     f"{a}_us": us[a], "ratio": us[a] / us[b], "rel_err": err})
        print(f"| {c} at {hw}x{hw}, {stride} | {us[a]:.1f} | {us[b]:.1f} | "
              f"{us[a] / us[b]:.2f} | {err:.1e} |")
    return rows
