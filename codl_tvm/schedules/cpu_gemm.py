"""CPU 1x1 conv2d (groups 1) as a packed GEMM with output pixels in SIMD lanes.

NCHW makes a 1x1 conv the GEMM ``out[OC, P] = W[OC, IC] x X[IC, P]`` over the ``P = OH*OW``
output pixels of the (padded) image, which are contiguous in both input and output. Unlike
the direct NCHWc kernel (register tile = 14 columns of one row x 32 channels), the pixel
tile runs across row ends, so narrow images (OW = 13, 26, 32) and one-row H-split parts waste
no lanes, and the OC block ``mr`` is picked to divide OC (21 -> 7, 125 -> 5).

The weight is packed to panels ``[OC/mr, IC, mr]`` (once at compile time where it is a
constant, :mod:`.prepack`; else per call, OC*IC copies, ~1/(2P) of the GEMM's work); per call
the input is packed to ``[P/np, IC, np]`` (with the conv's zero padding and the pixel
tail materialised, so the hot loop has no predicate; at stride > 1 it samples the pixels the
window reads); the accumulator ``mr x nv`` SIMD vectors stays in registers over the whole IC
loop; (pixel tile, OC block) tasks run in parallel. The dispatch sends it every stride-1 1x1
conv (``tiling.gemm_wins``); at stride > 1 it was measured against the direct conv and left
to it.

Where the pixels of an unpadded stride-1 conv fill whole tiles (``tiling.gemm_plan``), a
tile's pixels are already consecutive floats of each input channel and output channel: the
kernel reads the input where it is and writes the output (epilogue included) straight from
the accumulator, with no packed input and no unpack pass, a task computing a run of tiles of
one OC block. On large images the passes moved three times the output's bytes through the
caches.
"""

from __future__ import annotations

import math

from tvm import te, tirx
from tvm.s_tir import Schedule

from codl_tvm import tiling
from codl_tvm.tiling import MAX_VECS  # noqa: F401 - the tile rules live there

from .analysis import Conv2DInfo, OpInfo
from .blocking import Blocking
from .cpu_conv import out_shape
from .prepack import WeightPacked, has_block
from .target_info import TargetInfo


def applies(c: Conv2DInfo) -> bool:
    """The geometry this kernel computes: 1x1, groups 1, any stride, dilation irrelevant."""
    return tiling.gemm_applies(c)


def wins(info: OpInfo, t: TargetInfo) -> bool:
    """Dispatch predicate: every 1x1 conv at stride 1 (``tiling.gemm_wins``).

    Measured against the direct NCHWc kernel on the same sub-ops: the 274 stride-1 1x1
    sub-ops the direct conv ran in the H100 samples, strata and ResNet-50, on the H100 host's
    16-core Sapphire Rapids in one device call, took 0.65x the direct conv's time (geometric
    mean; >10% faster on 239, >10% slower on 8, the worst 1.23x); the samples' 139 on the
    2-core Sapphire Rapids dev VM, 0.60x (faster on 121, slower on 1). Before that the GEMM
    took only the shapes the direct tile fits badly (OC not a multiple of 32, >= 10% of its
    columns wasted, a row narrower than one column tile), from 2-core znver4 measurements
    where elsewhere the two were 0.73-1.35x; both kernels changed since. At stride > 1 the
    direct conv keeps them.
    """
    c = info.conv
    return info.dtype == "float32" and c is not None and tiling.gemm_wins(c, t)


def _padded_pixel(c: Conv2DInfo, x: te.Tensor, n, k, q):
    """Input value feeding output pixel ``q`` (row-major over OH x OW), 0 in the pad/tail."""
    top, left = c.pad[0], c.pad[1]
    y, xx = q // c.ow, q % c.ow
    hi, wi = y * c.stride[0] - top, xx * c.stride[1] - left
    conds = [q < c.oh * c.ow]  # the pixel tail of the last tile
    if top or c.pad[2]:
        conds += [hi >= 0, hi < c.h]
    if left or c.pad[3]:
        conds += [wi >= 0, wi < c.w]
    return tirx.if_then_else(tirx.all(*conds), x[n, k, hi, wi], tirx.const(0.0, x.dtype))


def plan(c: Conv2DInfo, t: TargetInfo) -> tiling.GemmPlan:
    """The tile, and whether (and in runs of how many tiles) :func:`gemm_compute` reads its
    input and writes its output in place (``tiling.gemm_plan``)."""
    return tiling.gemm_plan(c, t, padded=any(c.pad))


def in_place(c: Conv2DInfo, t: TargetInfo) -> bool:
    """Whether :func:`gemm_compute` reads its input and writes its output in place."""
    return plan(c, t).in_place


def last_block(c: Conv2DInfo, t: TargetInfo) -> str:
    """The block the conv's epilogue is inlined into: the accumulator's write-back where the
    kernel writes its output in place, else the unpack pass."""
    return "codl_gemm_local" if in_place(c, t) else "codl_unpack"


def _in_place_body(c: Conv2DInfo, mr: int):
    """``(x, packed w) -> out``: the GEMM over the flat pixels of the input as it is; the
    output is a view of its result, inlined into the write-back by the schedule."""

    def body(x: te.Tensor, wpk: te.Tensor) -> te.Tensor:
        rk = te.reduce_axis((0, c.ic), name="rk")
        acc = te.compute(
            (c.n, c.oc, c.oh * c.ow),
            lambda n, f, q: te.sum(wpk[f // mr, rk, f % mr] * x[n, rk, q // c.ow, q % c.ow],
                                   axis=[rk]),
            name="codl_gemm",
        )
        return te.compute(out_shape(c), lambda n, f, y, xx: acc[n, f, y * c.ow + xx],
                          name="codl_unpack")

    return body


def gemm_compute(c: Conv2DInfo, t: TargetInfo):
    """The kernel ``(x, w) -> out`` for :func:`rebuild.rebuild`, its weight pass apart."""
    mr, nv, run = plan(c, t)
    np_ = nv * t.lanes
    ocp = math.ceil(c.oc / mr)
    pixels = c.oh * c.ow
    pp = math.ceil(pixels / np_)

    def pack(w: te.Tensor) -> te.Tensor:
        return te.compute(
            (ocp, c.ic, mr),
            lambda o, k, i: tirx.if_then_else(
                o * mr + i < c.oc, w[o * mr + i, k, 0, 0], tirx.const(0.0, w.dtype)
            ),
            name="codl_wpack",
        )

    if run:
        return WeightPacked(pack, _in_place_body(c, mr))

    def body(x: te.Tensor, wpk: te.Tensor) -> te.Tensor:
        xpk = te.compute(
            (c.n, pp, c.ic, np_),
            lambda n, po, k, pi: _padded_pixel(c, x, n, k, po * np_ + pi),
            name="codl_xpack",
        )
        rk = te.reduce_axis((0, c.ic), name="rk")
        acc = te.compute(
            (c.n, ocp, mr, pp * np_),
            lambda n, o, i, q: te.sum(
                wpk[o, rk, i] * xpk[n, q // np_, rk, q % np_], axis=[rk]
            ),
            name="codl_gemm",
        )
        return te.compute(
            out_shape(c),
            lambda n, f, y, xx: acc[n, f // mr, f % mr, y * c.ow + xx],
            name="codl_unpack",
        )

    return WeightPacked(pack, body)


def schedule_gemm(sch: Schedule, c: Conv2DInfo, t: TargetInfo, rule: str) -> Blocking:
    """Register-tile, vectorise and parallelise the blocks of :func:`gemm_compute`."""
    mr, nv, run = plan(c, t)
    np_ = nv * t.lanes
    gemm = sch.get_sblock("codl_gemm")
    direct = run > 0
    if direct:  # (n, f, q, k): a task is a run of pixel tiles of one OC block
        n, f, q, k = sch.get_loops(gemm)
        o, i = sch.split(f, [None, mr])
        pr, po, pv, pl = sch.split(q, [None, run, nv, t.lanes])
        sch.reorder(n, pr, o, po, k, i, pv, pl)
        task, tile = sch.fuse(n, pr, o), po
    else:
        n, o, i, q, k = sch.get_loops(gemm)
        po, pv, pl = sch.split(q, [None, nv, t.lanes])
        sch.reorder(n, po, o, k, i, pv, pl)
        task = tile = sch.fuse(n, po, o)
    sch.parallel(task)
    acc = sch.cache_write(gemm, 0, "local")
    sch.reverse_compute_at(acc, tile)
    sch.unroll(i)
    sch.unroll(pv)
    sch.vectorize(pl)
    sch.decompose_reduction(gemm, k)
    sch.vectorize(sch.get_loops(sch.get_sblock("codl_gemm_init"))[-1])
    wb = sch.get_loops(acc)
    sch.vectorize(sch.split(wb[-1], [None, t.lanes])[-1])
    if has_block(sch, "codl_wpack"):  # not in the version that reads a packed weight
        _pack_loops(sch, "codl_wpack", 0)
    if not direct:  # in place, the unpack is a view the epilogue inlines into the write-back
        _pack_loops(sch, "codl_xpack", t.lanes)
        _pack_loops(sch, "codl_unpack", t.lanes)
    tasks = tiling.gemm_tasks(c, t, padded=any(c.pad))
    return Blocking(
        algorithm="gemm-1x1", processor="cpu", op="conv2d",
        output_size=c.n * c.oc * c.oh * c.ow,
        block_shape={"oc": mr, "pixels": np_}, basic_unit_shape={"oc": 1, "pixels": t.lanes},
        num_blocks=tasks, cores=t.cores, vector_lanes=t.lanes, grid={"parallel": tasks},
        rule=rule,
    )


def _pack_loops(sch: Schedule, name: str, lanes: int) -> None:
    """Outer loops of an injective block parallel; the innermost vectorised when ``lanes``."""
    loops = sch.get_loops(sch.get_sblock(name))
    inner = loops[-1]
    if lanes:
        extent = int(sch.get(inner).extent)
        if extent % lanes == 0:
            sch.vectorize(sch.split(inner, [None, lanes])[-1])
    outer = loops[:-1]
    if outer:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
