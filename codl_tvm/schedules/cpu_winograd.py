"""CPU 3x3 stride-1 conv2d by Winograd F(2x2, 3x3), output channels in SIMD lanes.

Stages (all ``te``, one PrimFunc): pad the input to whole 4x4 tiles (the conv's padding,
asymmetric or not, included), input transform ``V = B^T d B`` and weight transform
``U = G g G^T`` (both in panels, :func:`panels`), 16 batched GEMMs ``M[e] = U[e] x V[e]``
with a ``pt x ocb`` register tile (``pt`` tiles broadcast, ``ocb`` = 1-2 SIMD vectors of
channels, as in the direct kernel), output transform ``Y = A^T M A``,
and the unpack to NCHW (where a fused epilogue is inlined). F(2,3) needs 2.25x fewer
multiplies than direct; F(4,3) would need 4x fewer but its float32 error exceeds 1e-5 on
large IC, the project's tolerance.

Where the weight is a constant of the model the weight transform runs once, at compile time
(:mod:`.prepack`); otherwise it runs per call, ``16 * 9`` flops per (oc, ic) pair, about
``4.5 / P`` of the GEMM for ``P`` tiles.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tvm import te, tirx
from tvm.s_tir import Schedule

from codl_tvm import tiling
from codl_tvm.tiling import M_TILE, R_TILE  # noqa: F401 - the tile rules live there

from .analysis import Conv2DInfo, OpInfo
from .blocking import Blocking
from .cpu_conv import out_shape, padded_input, unpack_by_block
from .prepack import WeightPacked, has_block
from .target_info import TargetInfo

BT = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G = ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1))
AT = ((1, 1, 1, 0), (0, 1, -1, -1))
# V's plane stride: one 64-byte line past a multiple of 4 KiB (the L1 set span of x86 cores
# since Nehalem: 32 KiB / 8 ways, 48 KiB / 12 ways), so 16 planes use 16 different sets
V_PLANE_ALIGN_FLOATS = 1024
V_PLANE_SKEW_FLOATS = 16


def applies(c: Conv2DInfo) -> bool:
    """3x3, stride 1, dilation 1, groups 1 (any padding)."""
    return tiling.winograd_applies(c)


def wins(info: OpInfo, _t: TargetInfo) -> bool:
    """Dispatch predicate: 3x3 stride-1 convs of at least 64 channels in and out
    (``tiling.winograd_wins``).

    First from measurements on a 2-core znver4 dev CPU, before the Winograd's operands were
    stored as panels: Winograd beat the direct NCHWc kernel by 1.16-2.8x on every 3x3 s1
    workload shape with IC >= 64, OC >= 64 and IC*OC >= 64*128 (15 shapes, 13x13 to
    128x160), and lost where the channels are few (IC 3: 0.6-0.7x; 32->64: 0.87x; 64->64 at
    256x256: 0.74x): there the memory-bound transforms (~16 values per input and output
    pixel) outweigh the 2.25x fewer multiplies. H-split parts (1, 3, 5, 7 output rows of
    13-104 wide layers with IC*OC >= 128*256) won 1.5-2.0x too, one-row parts included.
    With the panels (``benchmarks/cpu_conv_rules.py``, both kernels reading packed weights,
    caches flushed before each call), 64->64 convs run Winograd too
    (``cpu_winograd_64x64``): on the GPU machine's 16-core Sapphire Rapids 0.66-0.79x the
    direct conv's time at 28x28 to 112x112 (three runs, 16 and 4 threads); on 2 Zen 3 cores
    0.64-0.97x at 28x28 and 56x56 (noisy between runs), 1.01-1.04x at 112x112 and 224x224.
    32->64 stays direct (0.75-1.20x there, 0.84-0.97x on the 16 cores).
    """
    c = info.conv
    return info.dtype == "float32" and c is not None and tiling.winograd_wins(c)


def tiles(c: Conv2DInfo) -> tuple[int, int]:
    """(tile rows, tile columns) of 2x2 output tiles covering OH x OW."""
    return tiling.winograd_grid(c)


def wino_tiles(c: Conv2DInfo, t: TargetInfo) -> tuple[int, int]:
    """(ocb, pt): channels per SIMD block and Winograd tiles per register tile."""
    return tiling.winograd_tiles(c, t)


def _combine(mat_a, mat_b, a: int, b: int, load: Callable[[int, int], tirx.PrimExpr]):
    """``sum_rs mat_a[a][r] * load(r, s) * mat_b[b][s]``, zero coefficients skipped."""
    total = None
    for r, ca in enumerate(mat_a[a]):
        for s, cb in enumerate(mat_b[b]):
            coef = ca * cb
            if coef == 0:
                continue
            term = load(r, s)
            if coef == -1:
                total = -term if total is None else total - term
                continue
            if coef != 1:
                term = term * tirx.const(float(coef), "float32")
            total = term if total is None else total + term
    return total


def _select(index, exprs: list[tirx.PrimExpr]) -> tirx.PrimExpr:
    """``exprs[index]`` as a Select chain; folds once the index loop is unrolled."""
    out = exprs[-1]
    for i in range(len(exprs) - 2, -1, -1):
        out = tirx.Select(index == i, exprs[i], out)
    return out


def panels() -> bool:
    """Whether ``U`` and ``V`` are stored as panels (``KernelVariants.cpu_winograd_panels``):
    what one GEMM task reads of them contiguous, ``U`` as ``[16, OC/ocb, IC, ocb]`` and ``V``
    as ``[N, 16, P/pt, IC, pt]``. Off: ``U`` as ``[OC/ocb, IC, 16, ocb]``, whose 16 elements
    interleave, so a task reads one cache line per 1 KiB (``ocb`` 16) and four per 4 KiB
    page, too few for the hardware prefetchers, which stop at page boundaries; ``V`` as
    ``[N, 16, IC, P]``, ``pt`` of every ``P`` floats."""
    return tiling.current_variants().cpu_winograd_panels


def u_shape(c: Conv2DInfo, ocb: int, panel: bool) -> tuple[int, int, int, int]:
    ocp = math.ceil(c.oc / ocb)
    return (16, ocp, c.ic, ocb) if panel else (ocp, c.ic, 16, ocb)


def v_shape(c: Conv2DInfo, pt: int, pp: int, panel: bool) -> tuple[int, ...]:
    """``V``: in panels ``[N, 16, P/pt, IC, pt]``, a task's ``IC x pt`` tiles contiguous;
    else ``[N, 16, IC, P]``, ``pt`` floats per ``P``-float row."""
    return (c.n, 16, pp // pt, c.ic, pt) if panel else (c.n, 16, c.ic, pp)


def winograd_compute(c: Conv2DInfo, t: TargetInfo):
    """The kernel ``(x, w) -> out`` for :func:`rebuild.rebuild`, the weight transform apart
    (:class:`~.prepack.WeightPacked`)."""
    panel = panels()
    ocb, pt = wino_tiles(c, t)
    th, tw = tiles(c)
    ntiles = th * tw
    pp = math.ceil(ntiles / pt) * pt
    ocp = math.ceil(c.oc / ocb)
    zero = tirx.const(0.0, "float32")

    def pack(w: te.Tensor) -> te.Tensor:
        def u_body(*idx):
            e, o, k, i = idx if panel else (idx[2], idx[0], idx[1], idx[3])
            oc = o * ocb + i

            def load(r, s):
                return w[oc, k, r, s]

            exprs = [_combine(G, G, a, b, load) for a in range(4) for b in range(4)]
            return tirx.if_then_else(oc < c.oc, _select(e, exprs), zero)

        return te.compute(u_shape(c, ocb, panel), u_body, name="codl_wino_u")

    def body(x: te.Tensor, u: te.Tensor) -> te.Tensor:
        xp = padded_input(c, x, M_TILE * th + 2, M_TILE * tw + 2)

        def v_body(*idx):
            n, e, k, p = (idx[0], idx[1], idx[3], idx[2] * pt + idx[4]) if panel else idx
            ty, tx = p // tw, p % tw

            def load(r, s):
                return xp[n, k, ty * M_TILE + r, tx * M_TILE + s]

            exprs = [_combine(BT, BT, a, b, load) for a in range(4) for b in range(4)]
            return tirx.if_then_else(p < ntiles, _select(e, exprs), zero)

        v = te.compute(v_shape(c, pt, pp, panel), v_body, name="codl_wino_v")

        rk = te.reduce_axis((0, c.ic), name="rk")
        m = te.compute(
            (c.n, 16, ocp, pp, ocb),
            lambda n, e, o, p, i: te.sum(
                (u[e, o, rk, i] if panel else u[o, rk, e, i])
                * (v[n, e, p // pt, rk, p % pt] if panel else v[n, e, rk, p]), axis=[rk]),
            name="codl_wino_gemm",
        )

        def y_body(n, o, p, i, j, f):
            def load(a, b):
                return m[n, a * 4 + b, o, p, f]

            exprs = [_combine(AT, AT, ii, jj, load) for ii in range(2) for jj in range(2)]
            return _select(i * 2 + j, exprs)

        y = te.compute((c.n, ocp, ntiles, M_TILE, M_TILE, ocb), y_body, name="codl_wino_y")
        return te.compute(
            out_shape(c),
            lambda n, f, yy, xx: y[
                n, f // ocb, (yy // M_TILE) * tw + xx // M_TILE, yy % M_TILE, xx % M_TILE,
                f % ocb,
            ],
            name="codl_unpack",
        )

    return WeightPacked(pack, body)


def schedule_winograd(sch: Schedule, c: Conv2DInfo, t: TargetInfo, rule: str) -> Blocking:
    """Register-tile the batched GEMM; unroll the transforms; everything parallel."""
    ocb, pt = wino_tiles(c, t)
    gemm = sch.get_sblock("codl_wino_gemm")
    n, e, o, p, i, k = sch.get_loops(gemm)
    po, pi = sch.split(p, [None, pt])
    iv, il = sch.split(i, [None, t.lanes])
    sch.reorder(n, e, o, po, k, pi, iv, il)
    task = sch.fuse(n, e, o, po)
    sch.parallel(task)
    acc = sch.cache_write(gemm, 0, "local")
    sch.reverse_compute_at(acc, task)
    sch.unroll(pi)
    sch.unroll(iv)
    sch.vectorize(il)
    sch.decompose_reduction(gemm, k)
    sch.vectorize(sch.get_loops(sch.get_sblock("codl_wino_gemm_init"))[-1])
    sch.vectorize(sch.get_loops(acc)[-1])
    # loops (n, IC, tiles..., e) whatever the layout; e, the Select index, unrolled
    order = (0, 3, 2, 4, 1) if panels() else (0, 2, 3, 1)
    _transform(sch, "codl_wino_v", order=order, n_par=2, unroll=(1,), vec=None)
    # The input transform stores a tile's 16 values one V plane (IC x P' floats) apart. A
    # plane that is a multiple of the L1's set span (4 KiB) put all 16 lines in one 12-way
    # set, so every store missed: parts 1.5x slower than their neighbours on the H100 host
    # (PREDICTOR.md). One cache line more per plane spreads them over 16 sets.
    sch.storage_align(sch.get_sblock("codl_wino_v"), 0, axis=1, factor=V_PLANE_ALIGN_FLOATS,
                      offset=V_PLANE_SKEW_FLOATS)  # fmt: skip
    if has_block(sch, "codl_wino_u"):  # not in the version that reads a transformed weight
        # read each 3x3 filter once, contiguously; the 16 results (e) go to lanes of 16
        # vectors: loops (o, k, i, e) whatever the layout
        order, e = ((1, 2, 3, 0), 0) if panels() else ((0, 1, 3, 2), 2)
        _transform(sch, "codl_wino_u", order=order, n_par=2, unroll=(e,), vec=None)
    _transform(sch, "codl_wino_y", order=(0, 1, 2, 3, 4, 5), n_par=3, unroll=(3, 4), vec=5)
    _outer_parallel(sch, "codl_pad")
    unpack_by_block(sch, "codl_unpack", ocb)
    tasks = tiling.winograd_tasks(c, t)
    return Blocking(
        algorithm="winograd-2x2-3x3", processor="cpu", op="conv2d",
        output_size=c.n * c.oc * c.oh * c.ow,
        block_shape={"e": 1, "oc": ocb, "tiles": pt},
        basic_unit_shape={"oc": t.lanes, "tiles": 1},
        num_blocks=tasks, cores=t.cores, vector_lanes=t.lanes, grid={"parallel": tasks},
        rule=rule,
    )


def _transform(
    sch: Schedule, name: str, order: tuple[int, ...], n_par: int, unroll: tuple[int, ...],
    vec: int | None,
) -> None:
    """Reorder a transform block's loops, parallelise the first ``n_par`` of ``order``, unroll
    the Select-index loops (so the Select chains fold to one expression each) and vectorise
    ``vec``."""
    loops = sch.get_loops(sch.get_sblock(name))
    sch.reorder(*(loops[i] for i in order))
    par = [loops[i] for i in order[:n_par]]
    sch.parallel(sch.fuse(*par) if len(par) > 1 else par[0])
    for i in unroll:
        sch.unroll(loops[i])
    if vec is not None:
        sch.vectorize(loops[vec])


def _outer_parallel(sch: Schedule, name: str) -> None:
    loops = sch.get_loops(sch.get_sblock(name))
    if len(loops) > 1:
        sch.parallel(sch.fuse(*loops[:-1]))
