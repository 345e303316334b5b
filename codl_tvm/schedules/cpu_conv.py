"""CPU conv2d: direct convolution with the output-channel block in SIMD lanes.

The weight is packed to ``[OC/ocb, IC, KH, KW, ocb]`` (zero-filled to a whole block; once at
compile time where it is a constant, :mod:`.prepack`, else in the kernel),
pads the input so every register tile is whole (no predicates in the hot loop), keeps an
``x_tile x ocb`` accumulator in registers, broadcasts one input value per FMA, and runs the
(channel block, row, column tile) tasks in parallel. Works for any stride, dilation,
asymmetric padding and odd sizes; the extra lanes/columns are computed and discarded.
"""

from __future__ import annotations

import math

from tvm import te, tirx
from tvm.s_tir import Schedule

from codl_tvm import tiling

from .analysis import Conv2DInfo
from .blocking import Blocking
from .prepack import WeightPacked, has_block
from .target_info import TargetInfo


def conv_tiles(c: Conv2DInfo, t: TargetInfo) -> tuple[int, int]:
    """(ocb, x_tile): channels per SIMD block and output columns per register tile
    (:func:`codl_tvm.tiling.direct_tiles`, which the predictor's mirror calls too)."""
    return tiling.direct_tiles(c, t)


def padded_input(c: Conv2DInfo, x: te.Tensor, hp: int, wp: int) -> te.Tensor:
    """``x`` with the conv's zero padding materialised (``hp`` x ``wp``), so the hot loop of
    every CPU conv kernel reads without predicates."""
    top, left = c.pad[0], c.pad[1]

    def pad_val(n, ci, h, ww):
        hi, wi = h - top, ww - left
        inside = tirx.all(hi >= 0, hi < c.h, wi >= 0, wi < c.w)
        return tirx.if_then_else(inside, x[n, ci, hi, wi], tirx.const(0.0, x.dtype))

    return te.compute((c.n, c.ic, hp, wp), pad_val, name="codl_pad")


def sampled_input(c: Conv2DInfo, x: te.Tensor, owp: int) -> te.Tensor:
    """The pixels a 1x1 conv reads, ``OH x owp`` per channel with its zero padding: at stride
    ``s`` the pass keeps one row and one column in ``s``, so the conv reads it contiguously
    at stride 1. Copying the whole input instead (``padded_input``) wrote ``s*s`` times the
    elements, and the conv's broadcasts then skipped through them."""
    (sh, sw), (top, left) = c.stride, c.pad[:2]

    def val(n, ci, y, xx):
        hi, wi = y * sh - top, xx * sw - left
        inside = tirx.all(hi >= 0, hi < c.h, wi >= 0, wi < c.w)
        return tirx.if_then_else(inside, x[n, ci, hi, wi], tirx.const(0.0, x.dtype))

    return te.compute((c.n, c.ic, c.oh, owp), val, name="codl_pad")


def direct_compute(c: Conv2DInfo, t: TargetInfo):
    """The kernel ``(x, w) -> out`` for :func:`rebuild.rebuild` (groups == 1), its weight
    pass apart (:class:`~.prepack.WeightPacked`)."""
    ocb, xt = conv_tiles(c, t)
    ocp = math.ceil(c.oc / ocb)
    owp = math.ceil(c.ow / xt) * xt
    (sh, sw), (dh, dw) = c.stride, c.dilation
    hp = (c.oh - 1) * sh + (c.kh - 1) * dh + 1
    wp = (owp - 1) * sw + (c.kw - 1) * dw + 1

    pointwise = c.kh == c.kw == 1
    if pointwise:  # the pad pass samples the strided pixels; the conv then runs at stride 1
        sh = sw = 1

    def pack(w: te.Tensor) -> te.Tensor:
        return te.compute(
            (ocp, c.ic, c.kh, c.kw, ocb),
            lambda o, ci, r, s, i: tirx.if_then_else(
                o * ocb + i < c.oc, w[o * ocb + i, ci, r, s], tirx.const(0.0, w.dtype)
            ),
            name="codl_wpack",
        )

    def body(x: te.Tensor, wpk: te.Tensor) -> te.Tensor:
        xp = sampled_input(c, x, owp) if pointwise else padded_input(c, x, hp, wp)
        rc = te.reduce_axis((0, c.ic), name="rc")
        ry = te.reduce_axis((0, c.kh), name="ry")
        rx = te.reduce_axis((0, c.kw), name="rx")
        acc = te.compute(
            (c.n, ocp, c.oh, owp, ocb),
            lambda n, o, y, xx, i: te.sum(
                xp[n, rc, y * sh + ry * dh, xx * sw + rx * dw] * wpk[o, rc, ry, rx, i],
                axis=[rc, ry, rx],
            ),
            name="codl_conv",
        )
        return te.compute(
            out_shape(c),
            lambda n, f, y, xx: acc[n, f // ocb, y, xx, f % ocb],
            name="codl_unpack",
        )

    return WeightPacked(pack, body)


def out_shape(c: Conv2DInfo) -> tuple[tirx.IntImm, ...]:
    """Output shape in int64, matching the legalized buffer (needed to bind the buffers)."""
    return tuple(tirx.IntImm("int64", v) for v in (c.n, c.oc, c.oh, c.ow))


def schedule_direct(sch: Schedule, c: Conv2DInfo, t: TargetInfo, rule: str) -> Blocking:
    """Tile, vectorise and parallelise the blocks made by :func:`direct_compute`."""
    ocb, xt = conv_tiles(c, t)
    conv = sch.get_sblock("codl_conv")
    n, o, y, x, i, rc, ry, rx = sch.get_loops(conv)
    xo, xi = sch.split(x, [None, xt])
    iv, il = sch.split(i, [None, t.lanes])
    sch.reorder(n, o, y, xo, rc, ry, rx, xi, iv, il)
    task = sch.fuse(n, o, y, xo)
    sch.parallel(task)
    acc = sch.cache_write(conv, 0, "local")
    sch.reverse_compute_at(acc, task)
    sch.unroll(xi)
    sch.unroll(iv)
    sch.vectorize(il)
    sch.decompose_reduction(conv, rc)
    init = sch.get_sblock("codl_conv_init")
    sch.vectorize(sch.get_loops(init)[-1])
    wb_loops = sch.get_loops(acc)
    sch.vectorize(wb_loops[-1])
    _parallel_spatial(sch, "codl_pad", t)
    if has_block(sch, "codl_wpack"):  # not in the version that reads a packed weight
        _parallel_spatial(sch, "codl_wpack", t)
    unpack_by_block(sch, "codl_unpack", ocb)
    tasks = math.ceil(c.oc / ocb) * c.n * c.oh * math.ceil(c.ow / xt)
    return Blocking(
        algorithm="direct-nchwc", processor="cpu", op="conv2d",
        output_size=c.n * c.oc * c.oh * c.ow,
        block_shape={"oc": ocb, "h": 1, "w": xt}, basic_unit_shape={"oc": t.lanes, "w": 1},
        num_blocks=tasks, cores=t.cores, vector_lanes=t.lanes, grid={"parallel": tasks},
        rule=rule,
    )


def unpack_by_block(sch: Schedule, name: str, ocb: int) -> None:
    """Unpack a channel-blocked result to NCHW with one (channel block, row) per task.

    One task reads the packed row of its block (``ocb`` channels of each pixel, adjacent)
    once and writes it to ``ocb`` output rows. Channel-outer order (the plain loop nest)
    re-reads the whole packed plane for every channel, ``ocb`` times the traffic once a
    plane outgrows the L2: YOLO-V2's 416x416 3->32 conv ran 2.5-3x slower on the dev CPU.
    """
    n, f, y, x = sch.get_loops(sch.get_sblock(name))
    fo, fi = sch.split(f, [None, ocb])
    sch.reorder(n, fo, y, fi, x)
    sch.parallel(sch.fuse(n, fo, y))


def _parallel_spatial(sch: Schedule, name: str, t: TargetInfo) -> None:
    """Parallelise the outer spatial loops of an injective block, vectorise the innermost."""
    block = sch.get_sblock(name)
    loops = sch.get_loops(block)
    if len(loops) >= 3:
        sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 1 else loops[0])
    elif len(loops) == 2:
        sch.parallel(loops[0])
