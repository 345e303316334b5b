"""GPU matmul on the tiled GEMM of :mod:`.gpu_conv` (cuda and opencl, one code path).

Transformers' dense layers (``x[..., M, K] @ w[K, N]``, batch axes in front being more rows)
and attention's batched matmuls (``q[b.., M, K] @ k[b.., K, N]``) are the GEMM
``out[i, j] = sum_k A[k, i] * B[k, j]`` with ``A = x^T`` and ``B = w``: the same shape as the
conv's ``WT`` x ``I2C`` (``A`` contiguous along K like the conv's weight, ``B`` along the
output columns like its im2col), so :func:`.gpu_conv.schedule_conv` schedules it unchanged:
shared-memory tiles padded to whole tiles, a register tile per thread, split-K over
``blockIdx.z`` where the tiles fill the SMs less than twice. A batched matmul runs one GEMM per
batch index on ``blockIdx.z`` instead (no split-K). Rows take the conv's output-channel side
of the tile tables (``tiling.VARIANTS``), columns its pixel side, so output rows are written
coalesced along N.
"""

from __future__ import annotations

import dataclasses
import math

from tvm import te, tirx
from tvm.s_tir import Schedule

from codl_tvm import tiling
from codl_tvm.tiling import DECLINE, Tile

from .analysis import matmul_dims
from .blocking import Blocking
from .cpu_rules import ravel, unravel
from .gpu_conv import PaddedGemm, gemm_grid, schedule_conv, schedule_tail, sm_count
from .rebuild import Unsupported, inline_shared_values, rebuild
from .target_info import TargetInfo


@dataclasses.dataclass(frozen=True)
class MatmulTiling(PaddedGemm):
    """Tile, split-K and padded sizes of one ``m x n x k`` GEMM (``batch`` of them)."""

    tile: Tile
    shape_class: str
    split: int  # K partitions (1: no split-K; always 1 when batched)
    m: int  # rows: M times the product of a dense layer's leading axes
    n: int
    k: int
    k_split: int  # padded K per partition, a multiple of bk
    rows: tuple[int, ...]  # the shape of the output's axes before N (batch axes, then M)
    batch: tuple[int, ...] = ()  # batch axes both operands lead with (batched matmul)


def make_tiling(func: tirx.PrimFunc, t: TargetInfo, arch: str = "",
                variant: str | None = None) -> MatmulTiling:
    """The tile of the first matching shape class of ``variant`` (default: the current
    ``KernelVariants.gpu_matmul``) and the split-K factor of ``func``'s matmul."""
    name = variant or tiling.current_variants().gpu_matmul
    if name == DECLINE:
        raise Unsupported(f"gpu_matmul={DECLINE}: GPU matmul left to DLight")
    dims = matmul_dims(func)
    if dims is None:
        raise Unsupported("matmul operands are not (M,K) x (K,N) params")
    m, k, n, lead, batched = dims
    rows = m if batched else math.prod(lead) * m
    row = tiling.shape_class(rows, n, k, name)
    if row.tile.threads > t.max_threads:
        raise Unsupported(f"tile needs {row.tile.threads} threads, target allows {t.max_threads}")
    if batched:
        k_split = math.ceil(k / row.tile.bk) * row.tile.bk
        return MatmulTiling(row.tile, row.name, 1, m, n, k, k_split, (*lead, m), lead)
    split, k_split = tiling.split_k(row, rows, n, k, sm_count(arch, t))
    return MatmulTiling(row.tile, row.name, split, rows, n, k, k_split, (*lead, m))


def matmul_compute(plan: MatmulTiling):
    """``build(a, b) -> out`` for :func:`rebuild.rebuild`, blocks named as the conv's."""
    zero = tirx.const(0.0, "float32")
    rows, batch = plan.rows, plan.batch
    r = te.reduce_axis((0, plan.k_split), name="rk")

    def a_val(g, kk, i, a):
        ok = tirx.all(kk < plan.k, i < plan.m)
        at = (*unravel(g, batch), i, kk) if batch else (*unravel(i, rows), kk)
        return tirx.if_then_else(ok, a[at], zero)

    def b_val(g, kk, j, b):
        ok = tirx.all(kk < plan.k, j < plan.n)
        return tirx.if_then_else(ok, b[(*unravel(g, batch), kk, j) if batch else (kk, j)], zero)

    def build(a: te.Tensor, b: te.Tensor) -> te.Tensor:
        if batch:
            g = math.prod(batch)
            wt = te.compute((g, plan.kp, plan.mp), lambda s, kk, i: a_val(s, kk, i, a),
                            name="codl_wt")
            im = te.compute((g, plan.kp, plan.np_), lambda s, kk, j: b_val(s, kk, j, b),
                            name="codl_im2col")
            gemm = te.compute((g, plan.mp, plan.np_),
                              lambda s, i, j: te.sum(wt[s, r, i] * im[s, r, j], axis=r),
                              name="codl_conv")
            return te.compute((*batch, plan.m, plan.n),
                              lambda *ix: gemm[ravel(ix[:-2], batch), ix[-2], ix[-1]],
                              name="codl_unpack")
        wt = te.compute((plan.kp, plan.mp), lambda kk, i: a_val(0, kk, i, a), name="codl_wt")
        im = te.compute((plan.kp, plan.np_), lambda kk, j: b_val(0, kk, j, b),
                        name="codl_im2col")
        ks = plan.k_split
        # whole tiles (mp x np_): no bounds check in the unrolled FMA loop (gpu_conv's note)
        gemm = te.compute((plan.split, plan.mp, plan.np_),
                          lambda s, i, j: te.sum(wt[s * ks + r, i] * im[s * ks + r, j], axis=r),
                          name="codl_conv")
        if plan.split == 1:
            return te.compute((*rows, plan.n),
                              lambda *ix: gemm[0, ravel(ix[:-1], rows), ix[-1]],
                              name="codl_unpack")
        rs = te.reduce_axis((0, plan.split), name="rs")
        return te.compute((*rows, plan.n),
                          lambda *ix: te.sum(gemm[rs, ravel(ix[:-1], rows), ix[-1]], axis=rs),
                          name="codl_splitk_sum")

    return build


def scheduled(func: tirx.PrimFunc, info, plan: MatmulTiling, threads: bool = True):
    """``func`` rebuilt around :func:`matmul_compute` and scheduled, epilogue inlined
    (``threads=False`` leaves the thread loops serial, so it also builds for llvm)."""
    new = rebuild(func, info.main_block, matmul_compute(plan), 2)
    sch = Schedule(new)
    names = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
    last = "codl_unpack" if plan.split == 1 else "codl_splitk_sum"
    epilogue = inline_shared_values(sch, names[names.index(last) + 1:])
    schedule_conv(sch, plan, threads)
    schedule_tail(sch, plan, threads)
    for name in epilogue:
        sch.reverse_compute_inline(sch.get_sblock(name))
    return sch.mod["main"]


def plan_blocking(plan: MatmulTiling, rule: str, warp: int) -> Blocking:
    """The blocking of the GEMM pass (pass 2 of split-K under ``sum.*`` keys)."""
    tile = plan.tile
    depth = math.prod(plan.batch) if plan.batch else plan.split
    grid = gemm_grid(plan, depth)
    return Blocking(
        algorithm="gpu-matmul-tiled-split-k" if plan.split > 1 else "gpu-matmul-tiled",
        processor="gpu", op="matmul", output_size=math.prod(plan.rows) * plan.n,
        block_shape={"rows": tile.bm, "cols": tile.bn},
        basic_unit_shape={"rows": tile.tm, "cols": tile.tn},
        num_blocks=plan.m_tiles * plan.n_tiles * depth, cores=None, vector_lanes=warp,
        threads_per_block=tile.threads, grid=grid, rule=rule,
    )


def apply(func, info, target, t: TargetInfo, rule: str):
    """Dispatch-table entry: rebuild ``func`` around the tiled GEMM and schedule it."""
    if info.dtype != "float32":
        raise Unsupported(f"tiled matmul is float32, not {info.dtype}")
    arch = str(target.attrs["arch"]) if "arch" in target.attrs else ""
    plan = make_tiling(func, t, arch)
    return scheduled(func, info, plan), plan_blocking(plan, rule, t.lanes)
