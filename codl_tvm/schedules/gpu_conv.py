"""GPU conv2d as a hand-scheduled implicit GEMM (cuda and opencl, one code path).

The GEMM is ``out[f, p] = sum_k WT[k, f] * I2C[k, p]`` with ``f`` the output channel (M),
``p = (n, y, x)`` the output pixel (N) and ``k = (ic, ry, rx)`` the reduction (K).
``WT`` and ``I2C`` (the im2col matrix, padding and stride folded into its index
expression) are never materialised in global memory: each thread block computes its
``BK x BM`` and ``BK x BN`` tiles straight into shared memory, one coalesced element per
thread per step, and every thread keeps a ``TM x TN`` register tile of outputs. Both tiles
are zero-padded to whole ``BM``/``BN``/``BK`` multiples and the GEMM runs over whole tiles,
so odd channel counts and pixel counts cost only a predicate on the shared-memory loads and
the output write, none in the FMA loop.

Shapes whose tiles fill the SMs less than :data:`MIN_WAVES` times (e.g. YOLO's 13x13
layers: 169 pixels, K = 9216) split K over ``S`` blocks (``blockIdx.z``): pass 1 writes
``S`` partial sums, pass 2 adds them and applies the fused epilogue. No atomics, so the
result is deterministic.

Tile configurations are data (:data:`VARIANTS`): a variant is a table of shape classes,
first matching row wins. ``KernelVariants.gpu_conv`` (``codl_tvm.compile(..., variants=)``) or
:func:`use_variant` picks the variant; ``"dlight"`` makes this rule decline so the DLight
implicit GEMM runs instead.
"""

from __future__ import annotations

import dataclasses
import math

from tvm import te, tirx
from tvm.s_tir import Schedule

from codl_tvm import tiling

# the tile table and split-K rule are pure data/functions shared with the predictor
from codl_tvm.tiling import (  # noqa: F401 - re-exported: this module's API
    BIG,
    DECLINE,
    DEFAULT_SMS,
    DEFAULT_VARIANT,
    MAX_SPLIT,
    MID,
    MIN_K_PER_SPLIT,
    MIN_WAVES,
    NARROW_OC,
    SMEM_BANKS,
    SMS,
    SUM_THREADS,
    THIN_OC,
    TINY_N,
    VARIANTS,
    ShapeClass,
    Tile,
    current_variant,
    use_variant,
    variant_names,
    wt_row_pad,
)

from . import conv_transpose
from .analysis import Conv2DInfo
from .blocking import Blocking
from .cpu_conv import out_shape
from .rebuild import Unsupported, rebuild
from .target_info import TargetInfo


class PaddedGemm(tiling.TiledGemm):
    """The padded GEMM sizes of a plan with ``split`` K partitions of ``k_split`` each (the
    conv's and the matmul's)."""

    split: int
    k_split: int

    @property
    def mp(self) -> int:
        return self.m_tiles * self.tile.bm

    @property
    def np_(self) -> int:
        return self.n_tiles * self.tile.bn

    @property
    def kp(self) -> int:
        return self.split * self.k_split


@dataclasses.dataclass(frozen=True)
class ConvTiling(PaddedGemm):
    """Everything the compute and the schedule need: tile, split and padded GEMM sizes."""

    c: Conv2DInfo
    tile: Tile
    shape_class: str
    split: int  # S: number of K partitions (1 = no split-K)
    m: int  # OC
    n: int  # output pixels (batch included)
    k: int  # IC * KH * KW
    k_split: int  # padded K per partition, a multiple of bk


def sm_count(target_arch: str, t: TargetInfo) -> int:
    return tiling.sm_count(target_arch, t.kind)


def make_tiling(
    c: Conv2DInfo, t: TargetInfo, arch: str = "", variant: str | None = None
) -> ConvTiling:
    """Pick the tile of the first matching shape class and the split-K factor."""
    name = variant or current_variant()
    if name == DECLINE:
        raise Unsupported(f"gpu_conv={DECLINE}: GPU conv left to DLight")
    if c.groups != 1:
        raise Unsupported("grouped conv")
    m, n, k = c.oc, c.n * c.oh * c.ow, c.ic * c.kh * c.kw
    row = tiling.shape_class(m, n, k, name)
    if row.tile.threads > t.max_threads:
        raise Unsupported(f"tile needs {row.tile.threads} threads, target allows {t.max_threads}")
    split, k_split = tiling.split_k(row, m, n, k, sm_count(arch, t))
    return ConvTiling(c, row.tile, row.name, split, m, n, k, k_split)


def conv_compute(plan: ConvTiling):
    """``build(x, w) -> out`` (int64 output shape) for :func:`rebuild.rebuild`; any target."""
    c = plan.c
    (sh, sw), (dh, dw) = c.stride, c.dilation
    top, left = c.pad[0], c.pad[1]
    khw, hw = c.kh * c.kw, c.oh * c.ow
    zero = tirx.const(0.0, "float32")

    def build(x: te.Tensor, w: te.Tensor) -> te.Tensor:
        def wt_val(k, f):
            ok = tirx.all(k < plan.k, f < plan.m)
            return tirx.if_then_else(ok, w[f, k // khw, k % khw // c.kw, k % c.kw], zero)

        def im_val(k, p):
            ci, ry, rx = k // khw, k % khw // c.kw, k % c.kw
            b, y, xx = p // hw, p % hw // c.ow, p % c.ow
            hi, wi = y * sh + ry * dh - top, xx * sw + rx * dw - left
            ok = tirx.all(k < plan.k, p < plan.n, hi >= 0, hi < c.h, wi >= 0, wi < c.w)
            return tirx.if_then_else(ok, x[b, ci, hi, wi], zero)

        wt = te.compute((plan.kp, plan.mp), wt_val, name="codl_wt")
        im = te.compute((plan.kp, plan.np_), im_val, name="codl_im2col")
        r = te.reduce_axis((0, plan.k_split), name="rk")
        # The GEMM runs over the padded (mp, np_) domain: whole tiles, so no bounds check in
        # the unrolled FMA loop (nvcc predicated each FMA on it: 2.3x the K-loop SASS and
        # 2.5-2.8x the H100 latency of OC 113/461 vs 512). The unpack / split-K sum read
        # only [:m, :n].
        conv = te.compute(
            (plan.split, plan.mp, plan.np_),
            lambda s, f, p: te.sum(
                wt[s * plan.k_split + r, f] * im[s * plan.k_split + r, p], axis=r
            ),
            name="codl_conv",
        )

        def pix(b, y, xx):
            return b * hw + y * c.ow + xx

        if plan.split == 1:
            return te.compute(
                out_shape(c), lambda b, f, y, xx: conv[0, f, pix(b, y, xx)], name="codl_unpack"
            )
        rs = te.reduce_axis((0, plan.split), name="rs")
        return te.compute(
            out_shape(c),
            lambda b, f, y, xx: te.sum(conv[rs, f, pix(b, y, xx)], axis=rs),
            name="codl_splitk_sum",
        )

    return build


def _bind(sch: Schedule, loop, tag: str, threads: bool) -> None:
    # threads=False keeps the loops serial: the same schedule then builds for llvm, which is
    # how the tests check its numerics on a machine without a GPU.
    if threads:
        sch.bind(loop, tag)


def _cooperative(sch: Schedule, block, tile: Tile, threads: bool, k_inner: bool) -> None:
    """Threads of the block load a shared tile together, consecutive threads on the axis
    contiguous in global memory (K for the OIHW weight, pixels for the input) so the global
    reads coalesce."""
    k, mn = sch.get_loops(block)[-2:]
    if k_inner:
        sch.reorder(mn, k)
    fused = sch.fuse(*((mn, k) if k_inner else (k, mn)))
    _, ty, tx = sch.split(fused, [None, tile.ty, tile.tx])
    _bind(sch, ty, "threadIdx.y", threads)
    _bind(sch, tx, "threadIdx.x", threads)


def schedule_conv(sch: Schedule, plan: ConvTiling, threads: bool = True,
                  weights_along_k: bool = True, prefetch: bool | None = None) -> None:
    """Block tile, shared staging, register tile and K unroll on :func:`conv_compute`'s
    blocks (epilogue blocks, if any, are inlined by the caller afterwards). The outer loop
    goes to ``blockIdx.z`` (split-K parts here, Winograd's 16 positions in gpu_winograd);
    ``weights_along_k``: the weight tile is contiguous along K in global memory (else M);
    ``prefetch`` (None: ``KernelVariants.gpu_prefetch``): stage the next K step's tiles through
    registers while this step's FMA loop runs."""
    if prefetch is None:
        prefetch = tiling.current_variants().gpu_prefetch
    tile = plan.tile
    conv = sch.get_sblock("codl_conv")
    s, f, p, r = sch.get_loops(conv)
    fo, fy, fi = sch.split(f, [None, tile.ty, tile.tm])
    po, px, pi = sch.split(p, [None, tile.tx, tile.tn])
    ko, ki = sch.split(r, [None, tile.bk])
    sch.reorder(s, fo, po, fy, px, ko, ki, fi, pi)
    for loop, tag in ((s, "blockIdx.z"), (fo, "blockIdx.y"), (po, "blockIdx.x"),
                      (fy, "threadIdx.y"), (px, "threadIdx.x")):
        _bind(sch, loop, tag, threads)
    acc = sch.cache_write(conv, 0, "local")
    sch.reverse_compute_at(acc, px)
    for name in ("codl_wt", "codl_im2col"):
        stage = sch.get_sblock(name)
        sch.set_scope(stage, 0, "shared")
        sch.compute_at(stage, ko)
        k_inner = weights_along_k and name == "codl_wt"
        writer = stage
        if prefetch:  # global -> registers, then registers -> shared: two loop nests
            writer = sch.cache_write(stage, 0, "local")
            _cooperative(sch, writer, tile, threads, k_inner=k_inner)
        _cooperative(sch, stage, tile, threads, k_inner=k_inner)
        if k_inner:
            # lanes store down a [bk][bm] column: pad the rows so they land in other banks
            # (the K axis: the tile's rows; a batched matmul's tile has the batch in front)
            axis = len(sch.get(writer).writes[0].region) - 2
            sch.storage_align(writer, 0, axis=axis, factor=SMEM_BANKS, offset=wt_row_pad(tile))
    if prefetch:
        # the next K step's global loads are issued before this step's FMAs, and stored to
        # shared memory after them: the loads' latency hides behind the FMA loop
        # children: weight load, weight store, input load, input store, FMA loop
        sch.annotate(ko, "software_pipeline_stage", [0, 0, 0, 0, 1])
        sch.annotate(ko, "software_pipeline_order", [0, 3, 1, 4, 2])
    for index in (0, 1):
        reg = sch.cache_read(conv, index, "local")
        sch.compute_at(reg, ki)
        sch.vectorize(sch.get_loops(reg)[-1])
    sch.unroll(ki)
    sch.unroll(fi)
    sch.unroll(pi)
    sch.decompose_reduction(conv, ko)


def schedule_tail(sch: Schedule, plan: ConvTiling, threads: bool = True) -> str:
    """Schedule the last kernel block (unpack copy or split-K sum); returns the name of the
    block the epilogue must be inlined into."""
    if plan.split == 1:
        sch.reverse_compute_inline(sch.get_sblock("codl_unpack"))
        return "codl_conv_local"
    total = sch.get_sblock("codl_splitk_sum")
    acc = sch.cache_write(total, 0, "local")
    loops = sch.get_loops(total)
    fused = sch.fuse(*loops[:-1])
    bx, tx = sch.split(fused, [None, SUM_THREADS])
    _bind(sch, bx, "blockIdx.x", threads)
    _bind(sch, tx, "threadIdx.x", threads)
    sch.reverse_compute_at(acc, tx)
    return sch.get(acc).name_hint



def gemm_grid(plan: PaddedGemm, depth: int) -> dict[str, int]:
    """The tiled GEMM's launch grid (``depth`` blocks on ``blockIdx.z``); split-K's sum pass
    under ``sum.*`` keys."""
    grid = {"blockIdx.x": plan.n_tiles, "blockIdx.y": plan.m_tiles, "blockIdx.z": depth,
            "threadIdx.x": plan.tile.tx, "threadIdx.y": plan.tile.ty}
    if plan.split > 1:
        grid["sum.blockIdx.x"] = math.ceil(plan.m * plan.n / SUM_THREADS)
        grid["sum.threadIdx.x"] = SUM_THREADS
    return grid


def plan_blocking(plan: ConvTiling, rule: str, warp: int) -> Blocking:
    """The blocking of the GEMM pass (pass 2 of split-K is stated under ``sum.*`` keys)."""
    tile = plan.tile
    grid = gemm_grid(plan, plan.split)
    return Blocking(
        algorithm="gpu-conv-tiled-split-k" if plan.split > 1 else "gpu-conv-tiled",
        processor="gpu", op="conv2d", output_size=plan.m * plan.n,
        block_shape={"oc": tile.bm, "pixels": tile.bn},
        basic_unit_shape={"oc": tile.tm, "pixels": tile.tn},
        num_blocks=plan.m_tiles * plan.n_tiles * plan.split, cores=None, vector_lanes=warp,
        threads_per_block=tile.threads, grid=grid, rule=rule,
    )


def apply(func, info, target, t: TargetInfo, rule: str):
    """Dispatch-table entry: rebuild ``func`` around the tiled kernel and schedule it."""
    arch = str(target.attrs["arch"]) if "arch" in target.attrs else ""
    plan = make_tiling(info.conv, t, arch)
    return scheduled(func, info, plan), plan_blocking(plan, rule, t.lanes)


def scheduled(func, info, plan: ConvTiling, threads: bool = True):
    """``func`` rebuilt around :func:`conv_compute` and scheduled, epilogue inlined (a
    conv2d_transpose's dilation and flip inlined into the im2col and weight stages)."""
    compute = conv_compute(plan)
    if info.kind == "conv2d_transpose":
        compute = conv_transpose.transposed(plan.c, info.input_dilation, compute)
    new = rebuild(func, info.main_block, compute, 2)
    sch = Schedule(new)
    if info.kind == "conv2d_transpose":
        conv_transpose.inline_prologue(sch)
    names = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
    last = "codl_unpack" if plan.split == 1 else "codl_splitk_sum"
    epilogue = names[names.index(last) + 1 :]
    schedule_conv(sch, plan, threads)
    schedule_tail(sch, plan, threads)
    for name in epilogue:
        sch.reverse_compute_inline(sch.get_sblock(name))
    return sch.mod["main"]


def kernel_grids(func) -> list[dict[str, int]]:
    """Launch extents of each device kernel of a scheduled PrimFunc (one per root loop
    nest bound to ``blockIdx``), in program order."""
    from .gpu_rules import _children, launch_extents

    body = func.body
    while not isinstance(body, tirx.SeqStmt) and not (
        isinstance(body, tirx.For) and body.thread_binding is not None
    ):
        kids = _children(body)
        if not kids:
            return []
        body = kids[0]
    nests = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    grids = []
    for nest in nests:
        grid = launch_extents(tirx.PrimFunc([], nest))
        if grid:
            grids.append(grid)
    return grids
