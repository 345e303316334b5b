"""The CPU's grouped and depthwise conv: a task per block of output rows of one channel,
output columns in SIMD lanes, the padded input rows in the task's cache."""

from __future__ import annotations

import math

from tvm import te, tirx
from tvm.s_tir import Schedule

from codl_tvm import tiling

from .analysis import Conv2DInfo
from .blocking import Blocking
from .cpu_conv import out_shape, padded_input
from .target_info import TargetInfo


def grouped_compute(c: Conv2DInfo, t: TargetInfo):
    """``build(x, w) -> out`` for grouped/depthwise conv, output columns in SIMD lanes.

    At column stride ``s > 1`` with ``cpu_depthwise_phases`` (the default) the padded input
    holds each row as ``s`` phases (columns ``j*s + p`` at ``[p, j]``), so the window's
    column ``rx`` reads phase ``rx*dw % s`` contiguously: the vectorised loop loads whole
    vectors instead of assembling each one lane by lane from a strided row."""
    owp = math.ceil(c.ow / t.lanes) * t.lanes
    (sh, sw), (dh, dw) = c.stride, c.dilation
    hp = (c.oh - 1) * sh + (c.kh - 1) * dh + 1
    wp = (owp - 1) * sw + (c.kw - 1) * dw + 1
    ocg, icg = c.oc // c.groups, c.ic_per_group
    phases = phase_count(c)

    def build(x: te.Tensor, w: te.Tensor) -> te.Tensor:
        rc = te.reduce_axis((0, icg), name="rc")
        ry = te.reduce_axis((0, c.kh), name="ry")
        rx = te.reduce_axis((0, c.kw), name="rx")
        if phases > 1:
            xp = phased_input(c, x, hp, owp + (c.kw - 1) * dw // sw, phases)

            def tap(ci, y, xx):
                return xp[ci[0], ci[1], y * sh + ry * dh, rx * dw % sw, xx + rx * dw // sw]
        else:
            xp = padded_input(c, x, hp, wp)

            def tap(ci, y, xx):
                return xp[ci[0], ci[1], y * sh + ry * dh, xx * sw + rx * dw]

        acc = te.compute(
            (c.n, c.oc, c.oh, owp),
            lambda n, f, y, xx: te.sum(
                tap((n, f // ocg * icg + rc), y, xx) * w[f, rc, ry, rx], axis=[rc, ry, rx]
            ),
            name="codl_conv",
        )
        return te.compute(out_shape(c), lambda *i: acc[i], name="codl_unpack")

    return build


def phase_count(c: Conv2DInfo) -> int:
    """Column phases of the grouped conv's padded input: its column stride with
    ``cpu_depthwise_phases``, else 1."""
    sw = c.stride[1]
    return sw if sw > 1 and tiling.current_variants().cpu_depthwise_phases else 1


def phased_input(c: Conv2DInfo, x: te.Tensor, hp: int, wq: int, phases: int) -> te.Tensor:
    """``x`` zero-padded as :func:`padded_input`, each row stored as ``phases`` rows of
    ``wq`` columns: ``[n, c, h, p, j]`` is padded column ``j * phases + p``."""
    top, left = c.pad[0], c.pad[1]

    def val(n, ci, h, p, j):
        hi, wi = h - top, j * phases + p - left
        inside = tirx.all(hi >= 0, hi < c.h, wi >= 0, wi < c.w)
        return tirx.if_then_else(inside, x[n, ci, hi, wi], tirx.const(0.0, x.dtype))

    return te.compute((c.n, c.ic, hp, phases, wq), val, name="codl_pad")


def schedule_grouped(sch: Schedule, c: Conv2DInfo, t: TargetInfo, rule: str) -> Blocking:
    """A task per block of output rows of one channel (:func:`tiling.depthwise_rows`), output
    columns in SIMD lanes. With ``cpu_depthwise_blocks`` (the default) a task pads the input
    rows it reads and writes its rows out (the epilogue goes there too) itself, in its cache;
    off, padding and write-out are parallel passes of their own over the whole tensors."""
    blocks = tiling.current_variants().cpu_depthwise_blocks
    rows = tiling.depthwise_rows(c.n, c.oc, c.oh, t.cores, blocks)
    conv = sch.get_sblock("codl_conv")
    n, f, y, x, rc, ry, rx = sch.get_loops(conv)
    yo, yi = sch.split(y, [None, rows])
    xo, xi = sch.split(x, [None, t.lanes])
    sch.reorder(n, f, yo, yi, xo, rc, ry, rx, xi)
    task = sch.fuse(n, f, yo)
    sch.parallel(task)
    acc = sch.cache_write(conv, 0, "local")
    sch.reverse_compute_at(acc, xo)
    sch.vectorize(xi)
    sch.decompose_reduction(conv, rc)
    sch.vectorize(sch.get_loops(sch.get_sblock("codl_conv_init"))[-1])
    sch.vectorize(sch.get_loops(acc)[-1])
    if blocks:
        # unit loops kept: the pad's loops stay (rows, [phase,] columns) whatever it reads
        sch.compute_at(sch.get_sblock("codl_pad"), task, preserve_unit_loops=True)
        _partition_columns(sch, c)
        sch.reverse_compute_at(sch.get_sblock("codl_unpack"), task)
    else:
        for name in ("codl_pad", "codl_unpack"):
            loops = sch.get_loops(sch.get_sblock(name))
            sch.parallel(sch.fuse(*loops[:-1]))
    tasks = c.n * c.oc * math.ceil(c.oh / rows)
    return Blocking(
        algorithm="depthwise-direct" if c.depthwise else "group-direct", processor="cpu",
        op="depthwise_conv2d" if c.depthwise else "group_conv2d",
        output_size=c.n * c.oc * c.oh * c.ow, block_shape={"oc": 1, "h": rows, "w": c.ow},
        basic_unit_shape={"w": t.lanes}, num_blocks=tasks, cores=t.cores,
        vector_lanes=t.lanes, grid={"parallel": tasks}, rule=rule,
    )


def _partition_columns(sch: Schedule, c: Conv2DInfo) -> None:
    """Cut the pad's column loop into the left padding, the columns every phase reads from
    the input, and the rest: the middle loop's bounds prove its condition true, so it is a
    plain copy that LLVM vectorises, where the whole loop was scalar (the condition)."""
    pad = sch.get_sblock("codl_pad")
    *_, phase, col = sch.get_loops(pad)
    s = phase_count(c)
    if s > 1:  # phases innermost: a task reads its input rows in order
        sch.reorder(col, phase)
        sch.unroll(phase)
    extent = int(sch.get(col).extent)
    left = c.pad[1]
    lo = min(extent, -(-left // s))
    hi = max(lo, min(extent, (left + c.w - s) // s + 1))
    parts = [n for n in (lo, hi - lo, extent - hi) if n > 0]
    if len(parts) > 1:  # the last part is what is left (the primitive infers it)
        sch.loop_partition(col, [*parts[:-1], None])
