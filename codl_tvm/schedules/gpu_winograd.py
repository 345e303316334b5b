"""GPU 3x3 stride-1 conv2d by Winograd F(2x2, 3x3) (cuda and opencl, one code path).

Four kernels in one PrimFunc (all ``te``, scheduled with ``s_tir.Schedule``):

1. input transform ``V[e, ic, p] = (B^T d B)[e]`` for each 4x4 input tile ``d`` (``p`` =
   batch x tile row x tile column): one thread per (channel, tile), the 16 results unrolled;
   the conv's zero padding (asymmetric or not) and the partial tiles of odd OH/OW are
   predicates on the loads, so no padded copy of the input is made;
2. weight transform ``U[e, ic, oc] = (G g G^T)[e]``: one thread per (ic, oc), per call,
   because weights are function parameters after the ``lift-cpu-weights`` phase;
3. 16 batched GEMMs ``M[e] = U[e]^T x V[e]`` (OC x P, K = IC), tiled like the implicit GEMM
   of :mod:`gpu_conv` (``U``/``V`` tiles zero-padded into shared memory, ``tm x tn``
   register tile per thread, tile from the same shape-class table) with
   ``blockIdx.z`` = the transform position ``e``; no split-K: the 16 positions already
   multiply the grid by 16;
4. output transform ``Y = A^T M A`` and unpack to NCHW, one thread per (oc, 2x2 tile), with
   the fused epilogue (bias, ReLU) inlined; the last row/column of a partial tile is
   predicated off.

The rule is on by default (``KernelVariants(gpu_winograd=False)`` turns it off) for
IC >= ``MIN_IC``, the shapes where it beat the tiled conv on the H100
(``benchmarks/kernels.py build --gpu-winograd``).
Its predicate, GEMM tile and grids are pure functions of :mod:`codl_tvm.tiling`, shared with
the latency predictor's mirror of the dispatch table (``predictor/mirror.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator

from tvm import te, tirx
from tvm.s_tir import Schedule

from codl_tvm import tiling
from codl_tvm.tiling import M_TILE, R_TILE, Tile

from . import gpu_conv
from .analysis import Conv2DInfo, OpInfo
from .blocking import Blocking
from .cpu_conv import out_shape
from .cpu_winograd import AT, BT, G, _combine, _select
from .gpu_conv import _bind
from .rebuild import Unsupported, inline_epilogue, rebuild
from .target_info import TargetInfo

ALGORITHM = "gpu-winograd-2x2-3x3"
TRANSFORM_THREADS = tiling.WINOGRAD_TRANSFORM_THREADS
TRANSFORMS = ("codl_wino_v", "codl_wino_u", "codl_unpack")  # grid keys "v.*", "u.*", "y.*"


@dataclasses.dataclass(frozen=True)
class WinogradTiling(tiling.TiledGemm):
    """Tile of the batched GEMM and its padded sizes: M = OC, N = P tiles, K = IC."""

    c: Conv2DInfo
    tile: Tile
    shape_class: str
    th: int  # tile rows
    tw: int  # tile columns

    @property
    def m(self) -> int:
        return self.c.oc

    @property
    def n(self) -> int:
        return self.c.n * self.th * self.tw

    @property
    def k(self) -> int:
        return self.c.ic

    @property
    def kp(self) -> int:
        return math.ceil(self.k / self.tile.bk) * self.tile.bk


def enabled() -> bool:
    """Whether the rule is on now (``KernelVariants.gpu_winograd``; on by default)."""
    return tiling.gpu_winograd_enabled()


@contextlib.contextmanager
def enable(on: bool = True) -> Iterator[None]:
    """Turn the rule on (or off) inside the ``with`` block (the benchmark builds its library
    so)."""
    with tiling.use_variants(gpu_winograd=on):
        yield


def applies(c: Conv2DInfo | None) -> bool:
    """3x3, stride 1, dilation 1, groups 1 (any padding)."""
    return c is not None and tiling.winograd_applies(c)


MIN_IC = tiling.GPU_WINOGRAD_MIN_IC  # measured threshold: see tiling.GPU_WINOGRAD_MIN_IC


def wins(info: OpInfo, _t: TargetInfo) -> bool:
    """Dispatch predicate: float32 3x3 stride-1 convs with IC >= ``MIN_IC``, unless the
    kernel variants turn the rule off (``gpu_winograd=False``)."""
    return (info.dtype == "float32" and info.conv is not None
            and tiling.gpu_winograd_wins(info.conv, MIN_IC))


def make_tiling(c: Conv2DInfo, t: TargetInfo) -> WinogradTiling:
    """The GEMM tile from the implicit GEMM's shape-class table (M = OC, N = tiles, K = IC)."""
    if not applies(c):
        raise Unsupported("Winograd F(2x2,3x3) needs a 3x3 stride-1 dilation-1 groups-1 conv")
    row, th, tw = tiling.gpu_winograd_gemm(c)
    if max(row.tile.threads, TRANSFORM_THREADS) > t.max_threads:
        raise Unsupported(f"tile needs {row.tile.threads} threads, target allows {t.max_threads}")
    return WinogradTiling(c, row.tile, row.name, th, tw)


def winograd_compute(plan: WinogradTiling):
    """``build(x, w) -> out`` for :func:`rebuild.rebuild`; any target."""
    c, tile = plan.c, plan.tile
    tw, ntiles = plan.tw, plan.th * plan.tw
    top, left = c.pad[0], c.pad[1]
    zero = tirx.const(0.0, "float32")
    mp, np_ = plan.m_tiles * tile.bm, plan.n_tiles * tile.bn

    def build(x: te.Tensor, w: te.Tensor) -> te.Tensor:
        def v_body(e, k, p):
            b, ty, tx = p // ntiles, p % ntiles // tw, p % tw

            def load(r, s):
                hi, wi = ty * M_TILE + r - top, tx * M_TILE + s - left
                ok = tirx.all(hi >= 0, hi < c.h, wi >= 0, wi < c.w)
                return tirx.if_then_else(ok, x[b, k, hi, wi], zero)

            return _select(e, [_combine(BT, BT, a, q, load) for a in range(4) for q in range(4)])

        def u_body(e, k, f):
            exprs = [_combine(G, G, a, q, lambda r, s: w[f, k, r, s])
                     for a in range(4) for q in range(4)]
            return _select(e, exprs)

        v = te.compute((R_TILE * R_TILE, c.ic, plan.n), v_body, name="codl_wino_v")
        u = te.compute((R_TILE * R_TILE, c.ic, c.oc), u_body, name="codl_wino_u")
        # shared-memory tiles, zero-padded to whole bm/bn/bk multiples (as in gpu_conv)
        us = te.compute(
            (16, plan.kp, mp),
            lambda e, k, f: tirx.if_then_else(tirx.all(k < c.ic, f < c.oc), u[e, k, f], zero),
            name="codl_wt",
        )
        vs = te.compute(
            (16, plan.kp, np_),
            lambda e, k, p: tirx.if_then_else(tirx.all(k < c.ic, p < plan.n), v[e, k, p], zero),
            name="codl_im2col",
        )
        rk = te.reduce_axis((0, plan.kp), name="rk")
        # whole tiles, so the unrolled FMA loop has no bounds check (see gpu_conv.conv_compute);
        # the output transform reads only [:m, :n]
        m = te.compute(
            (16, mp, np_),
            lambda e, f, p: te.sum(us[e, rk, f] * vs[e, rk, p], axis=rk),
            name="codl_conv",
        )

        def y_body(f, p, i, j):
            def load(a, q):
                return m[a * 4 + q, f, p]

            return _select(i * 2 + j, [_combine(AT, AT, ii, jj, load)
                                       for ii in range(2) for jj in range(2)])

        i64 = [tirx.IntImm("int64", d) for d in (plan.m, plan.n, M_TILE, M_TILE)]
        y = te.compute(i64, y_body, name="codl_wino_y")  # int64 like the unpack's loops
        return te.compute(
            out_shape(c),
            lambda b, f, yy, xx: y[
                f, b * ntiles + (yy // M_TILE) * tw + xx // M_TILE, yy % M_TILE, xx % M_TILE
            ],
            name="codl_unpack",
        )

    return build


def _flat_threads(sch: Schedule, loop, threads: bool) -> None:
    bx, tx = sch.split(loop, [None, TRANSFORM_THREADS])
    _bind(sch, bx, "blockIdx.x", threads)
    _bind(sch, tx, "threadIdx.x", threads)


def _schedule_transform(sch: Schedule, name: str, threads: bool) -> None:
    """One thread per (channel, tile) / (ic, oc): the position loop ``e`` innermost and
    unrolled so each Select chain folds to one expression."""
    e, k, q = sch.get_loops(sch.get_sblock(name))
    sch.reorder(k, q, e)
    _flat_threads(sch, sch.fuse(k, q), threads)
    sch.unroll(e)


def _schedule_output(sch: Schedule, threads: bool) -> None:
    """One thread per (batch, oc, 2x2 tile): ``Y`` of the tile in registers, then its up to
    four outputs (with the epilogue) written; odd OH/OW leave the last tile half-written."""
    unpack = sch.get_sblock("codl_unpack")
    b, f, yy, xx = sch.get_loops(unpack)
    ty, i = sch.split(yy, [None, M_TILE])
    tx, j = sch.split(xx, [None, M_TILE])
    sch.reorder(b, f, ty, tx, i, j)
    fused = sch.fuse(b, f, ty, tx)
    bx, th = sch.split(fused, [None, TRANSFORM_THREADS])
    _bind(sch, bx, "blockIdx.x", threads)
    _bind(sch, th, "threadIdx.x", threads)
    y = sch.get_sblock("codl_wino_y")
    sch.set_scope(y, 0, "local")
    sch.compute_at(y, th)
    for loop in sch.get_loops(y)[-2:]:
        sch.unroll(loop)
    sch.unroll(i)
    sch.unroll(j)


def scheduled(func, info: OpInfo, plan: WinogradTiling, threads: bool = True):
    """``func`` rebuilt around :func:`winograd_compute` and scheduled, epilogue inlined.

    ``threads=False`` keeps every loop serial, so the same schedule builds for llvm (how the
    tests check its numerics without a GPU)."""
    new = rebuild(func, info.main_block, winograd_compute(plan), 2)
    sch = Schedule(new)
    inline_epilogue(sch, "codl_unpack")
    for name in ("codl_wino_v", "codl_wino_u"):
        _schedule_transform(sch, name, threads)
    # both shared tiles are contiguous along M/N in global memory
    gpu_conv.schedule_conv(sch, plan, threads, weights_along_k=False)
    _schedule_output(sch, threads)
    return sch.mod["main"]


def plan_blocking(plan: WinogradTiling, rule: str, warp: int) -> Blocking:
    """Blocking of the batched GEMM kernel; the transforms' grids under ``v.``/``u.``/``y.``."""
    tile, c = plan.tile, plan.c
    grid = tiling.gpu_winograd_grid(c, tile, plan.th, plan.tw)
    return Blocking(
        algorithm=ALGORITHM, processor="gpu", op="conv2d",
        output_size=16 * plan.m * plan.n,  # the GEMM's output: 16 x OC x tiles
        block_shape={"oc": tile.bm, "tiles": tile.bn},
        basic_unit_shape={"oc": tile.tm, "tiles": tile.tn},
        num_blocks=16 * plan.m_tiles * plan.n_tiles, cores=None, vector_lanes=warp,
        threads_per_block=tile.threads, grid=grid, rule=rule,
    )


def apply(func, info: OpInfo, _target, t: TargetInfo, rule: str):
    """Dispatch-table entry."""
    if not applies(info.conv):
        raise Unsupported("not a 3x3 stride-1 conv")
    plan = make_tiling(info.conv, t)
    return scheduled(func, info, plan), plan_blocking(plan, rule, t.lanes)
