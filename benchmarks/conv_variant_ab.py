"""A kernel variant of the CPU's convs against the kernels without it, kernel by kernel (the
machinery of ``cpu_even_tiles.py``, whose shapes and variants it is given;
``cpu_conv_rules.py`` builds its kernels with :func:`checked_kernel` too).

A shape is ``(IC, OC, input H = W, K, stride)``, padding ``K // 2``, + bias + ReLU. Each is
built with the kernel the dispatch picks under each variant, reading its weight packed at load
as in a model (the rule's weight pass run once), checked against the unscheduled PrimFunc,
and timed interleaved with ``time_evaluator``, the caches flushed before each call.
"""

from __future__ import annotations

import functools
from pathlib import Path

import kernel_ab
import numpy as np

ROUNDS = 7


def conv(shape: tuple[int, ...]):
    from codl_tvm.schedules import testing as T

    ic, oc, hw, k, s = shape
    return T.conv2d_func((1, ic, hw, hw), (oc, ic, k, k), strides=(s, s), padding=(k // 2,) * 4,
                         bias_relu=True)


def kernels(func, target, changes: dict, rule: str | None = None):
    """(kernel reading the packed weight, weight pass, rule) that the dispatch gives ``func``
    under the kernel variants ``changes``, or that dispatch rule ``rule`` makes of it."""
    from codl_tvm.schedules import blocking_of, prepack
    from codl_tvm.schedules import testing as T
    from codl_tvm.schedules.analysis import analyze
    from codl_tvm.schedules.dispatch import RULES
    from codl_tvm.schedules.target_info import target_info
    from codl_tvm.tiling import use_variants

    with use_variants(**changes):
        name = rule or blocking_of(T.schedule(func, target)).rule
        (row,) = [r for r in RULES if r.name == name]
        with prepack.capture() as box:
            row.apply(func, analyze(func), target, target_info(target), row.name)
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


def checked_kernel(func, spec: dict, args: list, want, changes: dict,
                   rule: str | None = None) -> tuple[tuple, dict, str, float]:
    """((kernel lib, weight pass lib), their shapes, rule, relative error): the kernel for
    target ``spec``, checked against ``want`` (the unscheduled PrimFunc's output for ``args``)
    here, built a second time for this host's CPU only where ``spec``'s is not runnable here."""
    import tvm

    from codl_tvm.schedules import testing as T

    here_spec = T.runnable_here(spec)
    here = tvm.target.Target(here_spec)
    kern, pack, name = kernels(func, here, changes, rule)
    libs = (T.build(kern, here), T.build(pack, here))
    a = call_args(shapes_of(kern), libs[1], args, tvm.cpu())
    libs[0]["main"](*a)
    err = T.rel_error(a[-1].numpy(), want)
    if here_spec != spec:  # the target's CPU is not this one
        target = tvm.target.Target(spec)
        kern, pack, name = kernels(func, target, changes, rule)
        libs = (T.build(kern, target), T.build(pack, target))
    return libs, shapes_of(kern), name, err


def export(libs: tuple, folder: Path | None, stem: str) -> tuple:
    """``libs`` exported to ``folder`` as ``STEM.so`` and ``STEM-pack.so`` (their names), or
    ``libs`` where there is no folder."""
    if folder is None:
        return libs
    names = (f"{stem}.so", f"{stem}-pack.so")
    for lib, name in zip(libs, names, strict=True):
        lib.export_library(str(folder / name))
    return names


def build(spec: dict, folder: Path | None, shapes: list, variants: dict) -> list[dict]:
    """Each shape's kernels and weight passes under each of ``variants`` (label -> kernel
    variants changed) for ``spec`` (exported to ``folder`` if given), each checked against
    the unscheduled PrimFunc here (built for this host's CPU where ``spec``'s is not runnable
    here)."""
    import tvm

    from codl_tvm.schedules import testing as T

    target, cases = tvm.target.Target(spec), []
    here = tvm.target.Target(T.runnable_here(spec))  # the target's CPU may not be this one
    for shape in shapes:
        func = T.with_target(conv(shape), target)
        case = {"shape": list(shape), "libs": {}, "rule": {}, "shapes": {}, "rel_err": 0.0}
        args = T.random_args(func)
        want = T.run(T.build(func, here), func, args)
        for name, changes in variants.items():
            libs, case["shapes"][name], case["rule"][name], err = checked_kernel(
                func, spec, args, want, changes)
            case["rel_err"] = max(case["rel_err"], err)
            case["libs"][name] = export(libs, folder, "-".join(map(str, shape)) + f"-{name}")
        cases.append(case)
    return cases


def time_cases(cases: list[dict], folder: Path | None, labels: tuple[str, str],
               rounds: int) -> list[dict]:
    """Time each case's two kernels (``labels``: the variant, the baseline) interleaved;
    print and return the rows."""
    import tvm

    dev, rows = tvm.cpu(), []
    a, b = labels
    print(f"| IC->OC, input HxW, KxK / S | rule | {a} us | {b} us | {a} / {b} | rel err |")
    print("|---|---|---:|---:|---:|---:|")
    for case in cases:
        shape, calls, outs = tuple(case["shape"]), {}, {}
        ic, oc, hw, k, s = shape
        rng = np.random.default_rng(0)
        src = [rng.uniform(-1, 1, d).astype("float32")
               for d in ((1, ic, hw, hw), (oc, ic, k, k), (1, oc, 1, 1))]
        for name in labels:
            lib, pack = case["libs"][name]
            if folder is not None:
                lib, pack = (tvm.runtime.load_module(str(folder / f)) for f in (lib, pack))
            args = call_args(case["shapes"][name], pack, src, dev)
            lib["main"](*args)
            outs[name], calls[name] = args[-1].numpy(), (lib, args)
        err = max(case["rel_err"], kernel_ab.rel_diff(outs[b], outs[a]))
        us = kernel_ab.interleaved_us(calls, rounds)
        rule = case["rule"][a].removeprefix("cpu-conv2d-")
        rows.append({"ic": ic, "oc": oc, "hw": hw, "k": k, "stride": s, "rule": rule,
                     f"{a}_us": us[a], f"{b}_us": us[b], "ratio": us[a] / us[b],
                     "rel_err": err})
        print(f"| {ic}->{oc}, {hw}x{hw}, {k}x{k} / {s} | {rule} | {us[a]:.1f} | {us[b]:.1f} "
              f"| {us[a] / us[b]:.2f} | {err:.1e} |")
    return rows


def main(doc: str, shapes: list, variants: dict) -> None:
    """The command line of a variant A/B script: ``variants`` maps two labels (the variant,
    the baseline) to the kernel variants each changes; ``--shapes IC-OC-HW-K-S,...``
    replaces ``shapes``."""
    p = kernel_ab.parser(doc)
    p.add_argument("--shapes", help="IC-OC-HW-K-S,... instead of the default shapes")
    args = p.parse_args()
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("-")) for s in args.shapes.split(",")]
    labels = tuple(variants)
    kernel_ab.run(p, args, functools.partial(build, shapes=shapes, variants=variants),
                  functools.partial(time_cases, labels=labels, rounds=ROUNDS), ROUNDS)
