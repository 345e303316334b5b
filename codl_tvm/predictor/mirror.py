"""Which codl-tvm kernel runs a sub-op, and its block counts, from the :class:`OpSpec` alone.

A mirror of the dispatch table ``codl_tvm/schedules/dispatch.py`` (``RULES``, first matching
row wins) for batch-1 float32 sub-ops, built on the schedules' own pure tile rules
(:mod:`codl_tvm.tiling`), so the predictor needs neither a PrimFunc nor TVM's compiler. The
rows and their order are not kept here: :data:`ROWS` is derived from the one table both
share (``tiling.dispatch_table.TABLE``), each row matched by name to its mirror
(:data:`MIRRORS`) or to the reason it has none (:data:`NOT_MIRRORED`). The kernel variants
(``tiling.KernelVariants``) are the ``Machine``'s: those the predictor's samples were
profiled with.
``tests/test_predictor_blocking_mirror.py`` schedules the real sub-op kernels and checks that
the algorithm and the block counts agree with what the schedules record.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from codl_tvm import tiling
from codl_tvm.predictor.machine import Machine
from codl_tvm.predictor.opspec import COMPUTE_KINDS, OpSpec
from codl_tvm.tiling import GLOBAL_POOL_MIN_WINDOW
from codl_tvm.tiling.dispatch_table import TABLE, TableRow


@dataclass(frozen=True, init=False)
class Kernel:
    """The kernel a sub-op runs: its ``Blocking.algorithm`` and launch counts.

    ``num_blocks`` is ``Blocking.num_blocks``: parallel tasks (CPU) or thread blocks of the
    main pass (GPU); ``split`` the split-K partitions (``blockIdx.z``) and ``sum_blocks`` the
    blocks of split-K's second pass (``grid["sum.blockIdx.x"]``, 0 without split-K);
    ``grid`` the ``Blocking.grid`` items where the mirror computes all of them (GPU Winograd:
    the batched GEMM's and, under ``u.``/``v.``/``y.``, the transforms'), else empty.
    """

    algorithm: str
    num_blocks: int
    split: int = 1
    sum_blocks: int = 0
    grid: tuple[tuple[str, int], ...] = ()

    def __init__(
        self,
        algorithm: str,
        num_blocks: int,
        split: int = 1,
        sum_blocks: int = 0,
        grid: tuple[tuple[str, int], ...] = (),
    ) -> None:
        # one dict update instead of the frozen dataclass's five object.__setattr__ calls
        self.__dict__.update(algorithm=algorithm, num_blocks=num_blocks, split=split,
                             sum_blocks=sum_blocks, grid=grid)  # fmt: skip


def conv_shape(s: OpSpec) -> tiling.ConvShape:
    """The light ``Conv2DInfo`` of a conv sub-op (batch 1); built once per OpSpec."""
    return s.conv_shape


def is_dense_conv(s: OpSpec) -> bool:
    """A conv the groups-1 kernels run (a one-channel depthwise part is one)."""
    return s.kind in ("conv2d", "depthwise") and s.groups == 1


def gpu_variant(m: Machine) -> str:
    """The tile table the GPU conv rule uses on ``m`` (``KernelVariants.gpu_conv``)."""
    return m.variants.gpu_conv


def gpu_plan(s: OpSpec, m: Machine, variant: str) -> tuple[tiling.ShapeClass, int, int]:
    """(shape class, split-K factor, padded K per split) of ``gpu_conv.make_tiling``.

    Kept in ``s.memo``: the mirror's rule and the blocking terms both ask for it.
    """
    key = ("gpu_plan", m.sms, variant)
    memo = s.memo
    plan = memo.get(key)
    if plan is None:
        k = s.IC * s.KH * s.KW
        pixels = s.out_h * s.out_w
        row = tiling.shape_class(s.OC, pixels, k, variant)
        plan = memo[key] = (row, *tiling.split_k(row, s.OC, pixels, k, m.sms))
    return plan


# ---- CPU rows (dispatch.RULES, family "cpu") -------------------------------------------
def _cpu_gemm(s: OpSpec, m: Machine) -> Kernel | None:
    if not is_dense_conv(s) or not tiling.gemm_wins(
            c := conv_shape(s), m, m.variants.cpu_gemm == "always"):
        return None
    v = m.variants
    return Kernel("gemm-1x1", tiling.gemm_tasks(c, m, v.cpu_gemm_rows, v.cpu_gemm_fit,
                                                padded=any(s.pad),
                                                in_place=v.cpu_gemm_in_place))


def _cpu_winograd(s: OpSpec, m: Machine) -> Kernel | None:
    narrow = m.variants.cpu_winograd_64x64
    if not is_dense_conv(s) or not tiling.winograd_wins(c := conv_shape(s), narrow):
        return None
    return Kernel("winograd-2x2-3x3",
                  tiling.winograd_tasks(c, m, m.variants.cpu_even_tiles))


def _cpu_direct(s: OpSpec, m: Machine) -> Kernel | None:
    if not is_dense_conv(s):
        return None
    return Kernel("direct-nchwc",
                  tiling.direct_tasks(conv_shape(s), m, m.variants.cpu_even_tiles))


def _cpu_grouped(s: OpSpec, m: Machine) -> Kernel | None:
    if s.kind not in ("conv2d", "depthwise"):
        return None
    depthwise = s.groups == s.IC == s.OC
    return Kernel("depthwise-direct" if depthwise else "group-direct", depthwise_tasks(s, m)[1])


def depthwise_tasks(s: OpSpec, m: Machine) -> tuple[int, int]:
    """The CPU depthwise conv's output rows per task and its task count: a task computes a
    block of rows of one channel (:func:`codl_tvm.tiling.depthwise_rows`)."""
    rows = tiling.depthwise_rows(1, s.OC, s.out_h, m.cores, m.variants.cpu_depthwise_blocks)
    return rows, s.OC * ((s.out_h + rows - 1) // rows)


def _cpu_pool(s: OpSpec, _m: Machine) -> Kernel | None:
    return Kernel("pool", s.OC * s.out_h) if s.kind in ("pool_max", "pool_avg") else None


def _cpu_gemv(s: OpSpec, m: Machine) -> Kernel | None:
    if s.kind != "dense":
        return None
    vb = tiling.matmul_vector_block(s.OC, m.lanes)
    blocks = max(1, s.OC // vb)
    return Kernel("gemv", blocks // gemv_blocks_per_task(s, m))


def gemv_blocks_per_task(s: OpSpec, m: Machine) -> int:
    """``cpu_rules._blocks_per_task`` of a batch-1 dense (one row tile)."""
    vb = tiling.matmul_vector_block(s.OC, m.lanes)
    n_main = s.OC // vb * vb
    return tiling.matmul_blocks_per_task(n_main // vb, 1, s.IC * n_main * 4, m.cores)


def eltwise_gathered_passes(w: int, m: Machine) -> int:
    """Passes (bias-add, ReLU) of rows ``w`` wide whose kernel loads and stores by gather.

    LLVM fully unrolls a bias-add row of up to ``m.eltwise_unroll_add`` columns (a ReLU row
    up to ``m.eltwise_unroll_relu``) and then vectorizes the row loop with gathers and
    scatters; rows of one vector (``m.llvm_vector_floats``) or fewer stay contiguous. The
    limits are the target's (``profiler.codegen_facts``)."""
    vec = m.llvm_vector_floats
    return (vec < w <= m.eltwise_unroll_add) + (vec < w <= m.eltwise_unroll_relu)


# The direct conv's pad pass (``cpu_conv.padded_input``; all loops but the innermost fused and
# parallel) that only copies, no zero padding: LLVM fully unrolls its rows and vectorizes the
# row loop with one gather and one scatter per column where the copy keeps every row and
# column and rows are ``m.pad_gather_identity_w`` wide, or where it drops rows (a stride-2
# window's last input row) and rows are ``m.pad_gather_crop_w`` wide.
# A 1x1 window at stride > 1 samples its pixels instead (``cpu_conv.sampled_input``: ``hp``
# output rows of ``wp`` columns, the columns past OW a predicated tail). LLVM loads them by
# gather where rows are short: up to ``m.sampled_gather_w`` wide, or up to
# ``m.sampled_gather_inexact_w`` unless the samples end exactly at the input's last row and
# column (H = SH*OH, W = SW*OW), or ``m.sampled_gather_one_row_w`` wide for one row of a
# one-row part; and where a tail of two or more columns follows rows over
# ``m.sampled_gather_tail_w`` wide. The widths are the target's: ``profiler.codegen_facts``
# compiles these passes for it and reads them off the assembly;
# ``tests/test_predictor_pad_gather.py`` compiles the edges.


def sampled(s: OpSpec) -> bool:
    """Whether the direct conv's pad pass samples ``s``'s input (1x1 at stride > 1)."""
    return s.KH * s.KW == 1 and max(s.SH, s.SW) > 1


def padded_in(s: OpSpec, out_w: int) -> tuple[int, int]:
    """Rows, cols of the padded input the CPU kernels copy (whole register tiles)."""
    d = s.dilation
    return (s.out_h - 1) * s.SH + (s.KH - 1) * d + 1, (out_w - 1) * s.SW + (s.KW - 1) * d + 1


def direct_pad(s: OpSpec, owp: int) -> tuple[int, int]:
    """Rows, cols the direct conv's pad pass writes for ``owp`` output columns: a 1x1 window's
    pass samples only the pixels it reads (``cpu_conv.sampled_input``), so the conv reads them
    at stride 1 (at stride 1 the two geometries are one)."""
    return (s.out_h, owp) if s.KH * s.KW == 1 else padded_in(s, owp)


def _sampled_gathered(s: OpSpec, hp: int, wp: int, m: Machine) -> bool:
    tail = wp - s.out_w
    if tail:
        return tail >= 2 and wp > m.sampled_gather_tail_w
    if hp == 1:
        lo, hi = m.sampled_gather_one_row_w
        return lo <= wp <= hi
    exact = s.H == s.SH * s.out_h and s.W == s.SW * s.out_w
    return wp <= m.sampled_gather_w or (wp <= m.sampled_gather_inexact_w and not exact)


def pad_gathered(s: OpSpec, hp: int, wp: int, m: Machine) -> bool:
    """Whether the pad pass writing ``s``'s input to ``hp`` x ``wp`` loads (and, for a copy,
    stores) by gather on ``m``'s CPU target (see the comment above)."""
    if sampled(s):
        return _sampled_gathered(s, hp, wp, m)
    if any(s.pad):
        return False
    if hp == s.H and wp == s.W:
        lo, hi = m.pad_gather_identity_w
    elif 2 <= hp < s.H:
        lo, hi = m.pad_gather_crop_w
    else:
        return False
    return lo <= wp <= hi


def _cpu_eltwise(s: OpSpec, _m: Machine) -> Kernel | None:
    # the bias-add + ReLU kernel: all loops but the innermost fused and parallel
    return Kernel("parallel-loops", s.OC * s.out_h) if s.kind == "elementwise" else None


# ---- GPU rows (dispatch.RULES, family "gpu") -------------------------------------------
GPU_WINOGRAD = "gpu-winograd-2x2-3x3"  # gpu_winograd.ALGORITHM (that module imports TVM)


def _per_thread(s: OpSpec, m: Machine) -> int:
    """Blocks of DLight's Fallback: one output per thread, ``max_threads`` per block."""
    return math.ceil(s.out_elems / m.max_threads)


def _gpu_thin_oc(s: OpSpec, m: Machine) -> Kernel | None:
    if not is_dense_conv(s) or s.OC > tiling.THIN_OC_MAX:
        return None
    return Kernel("direct", _per_thread(s, m))


def gpu_winograd_plan(s: OpSpec, m: Machine) -> tuple[tiling.ShapeClass, int, int] | None:
    """(GEMM shape class, tile rows, tile columns) of ``gpu_winograd.make_tiling``, or None where
    the Winograd rule does not run ``s`` (its predicate fails or the tile has too many threads).
    """
    if not is_dense_conv(s) or not tiling.gpu_winograd_wins(
            c := conv_shape(s), enabled=m.variants.gpu_winograd):
        return None
    row, th, tw = tiling.gpu_winograd_gemm(c)
    if max(row.tile.threads, tiling.WINOGRAD_TRANSFORM_THREADS) > m.max_threads:
        return None
    return row, th, tw


def _gpu_winograd(s: OpSpec, m: Machine) -> Kernel | None:
    plan = gpu_winograd_plan(s, m)
    if plan is None:
        return None
    grid = tiling.gpu_winograd_grid(conv_shape(s), plan[0].tile, plan[1], plan[2])
    blocks = grid["blockIdx.x"] * grid["blockIdx.y"] * grid["blockIdx.z"]
    return Kernel(GPU_WINOGRAD, blocks, grid=tuple(sorted(grid.items())))


def _gpu_tiled(s: OpSpec, m: Machine) -> Kernel | None:
    variant = m.variants.gpu_conv
    if not is_dense_conv(s) or variant == tiling.DECLINE:
        return None
    row, split, _ = gpu_plan(s, m, variant)
    if row.tile.threads > m.max_threads:
        return None
    pixels = s.out_h * s.out_w
    blocks = math.ceil(s.OC / row.tile.bm) * math.ceil(pixels / row.tile.bn) * split
    if split == 1:
        return Kernel("gpu-conv-tiled", blocks)
    sum_blocks = math.ceil(s.OC * pixels / tiling.SUM_THREADS)
    return Kernel("gpu-conv-tiled-split-k", blocks, split, sum_blocks)


def _gpu_implicit_gemm(s: OpSpec, _m: Machine) -> Kernel | None:
    if not is_dense_conv(s):
        return None  # DLight Matmul: 64 OC x 32 pixels per block (not checked against IR)
    return Kernel("implicit-gemm", math.ceil(s.OC / 64) * math.ceil(s.out_h * s.out_w / 32))


GPU_GEMV = "dlight-reduction"  # the batch-1 dense kernel's Blocking.algorithm
GEMV_K_THREADS = 16  # DLight Reduction's len_ty: threads splitting K (inner-spatial case)


def gemv_columns(n: int) -> int:
    """Output columns per block of DLight Reduction on ``x[1, K] @ W[K, n]``: the largest
    divisor of ``n`` up to 16 (``dlight.gpu.reduction._suggest_inner_spatial_tx``)."""
    tx = 16
    while tx > 1 and n % tx:
        tx -= 1
    return tx


def _gpu_gemv(s: OpSpec, _m: Machine) -> Kernel | None:
    if s.kind != "dense":
        return None  # DLight's GEMV rules decline the K-outer weight; Reduction takes it
    return Kernel(GPU_GEMV, s.OC // gemv_columns(s.OC))


def _gpu_global_pool(s: OpSpec, _m: Machine) -> Kernel | None:
    """DLight Reduction on a 1x1-output pool: one block per channel (``gpu-global-pool2d``)."""
    if s.kind not in POOL or (s.out_h, s.out_w) != (1, 1) or s.KH * s.KW < GLOBAL_POOL_MIN_WINDOW:
        return None
    return Kernel("global-reduction", s.OC)


def _gpu_fallback(kinds: tuple[str, ...], algorithm: str) -> Callable:
    def rule(s: OpSpec, m: Machine) -> Kernel | None:
        return Kernel(algorithm, _per_thread(s, m)) if s.kind in kinds else None

    return rule


Rule = Callable[[OpSpec, Machine], Kernel | None]
CONV, POOL = ("conv2d", "depthwise"), ("pool_max", "pool_avg")
# the mirror of each row of the dispatch table, by the row's name: (rule, the OpSpec kinds it
# can take: it returns None for every other kind)
MIRRORS: dict[str, tuple[Rule, tuple[str, ...]]] = {
    "cpu-conv2d-gemm-1x1": (_cpu_gemm, CONV),
    "cpu-conv2d-winograd": (_cpu_winograd, CONV),
    "cpu-conv2d-direct-nchwc": (_cpu_direct, CONV),
    "cpu-grouped-conv2d": (_cpu_grouped, CONV),
    "cpu-pool2d": (_cpu_pool, POOL),
    "cpu-matmul": (_cpu_gemv, ("dense",)),
    "cpu-elementwise": (_cpu_eltwise, ("elementwise",)),
    "gpu-conv2d-thin-oc": (_gpu_thin_oc, CONV),
    "gpu-conv2d-winograd": (_gpu_winograd, CONV),
    "gpu-conv2d-tiled": (_gpu_tiled, CONV),
    "gpu-conv2d-implicit-gemm": (_gpu_implicit_gemm, CONV),
    "gpu-grouped-conv2d": (_gpu_fallback(CONV, "depthwise-direct"), CONV),
    "gpu-global-pool2d": (_gpu_global_pool, POOL),
    "gpu-pool2d": (_gpu_fallback(POOL, "pool"), POOL),
    "gpu-gemv": (_gpu_gemv, ("dense",)),
    "gpu-elementwise": (_gpu_fallback(("elementwise",), "elementwise"), ("elementwise",)),
}
# rows of the table the predictor has no mirror of, and why
NOT_MIRRORED: dict[str, str] = {
    "cpu-conv2d-transpose": "priced as its dilated conv on this kernel: TRANSPOSED",
    "gpu-conv2d-transpose-tiled": "priced as its dilated conv on this kernel: TRANSPOSED",
    "gpu-matmul-tiled": "a batch-1 dense always meets gpu-gemv's predicate (M <= 4)",
    "gpu-matmul": "a batch-1 dense always meets gpu-gemv's predicate (M <= 4)",
}


def rows_of(table: tuple[TableRow, ...]) -> dict[str, tuple[tuple[Rule, tuple[str, ...]], ...]]:
    """Per family, the mirrors of ``table``'s rows in the table's order. A row with neither a
    mirror nor a reason in :data:`NOT_MIRRORED` is an error: adding a rule to the dispatch
    table must say what the predictor makes of it."""
    unknown = [r.name for r in table if r.name not in MIRRORS and r.name not in NOT_MIRRORED]
    if unknown:
        raise ValueError(f"dispatch rows {unknown} have no mirror in predictor/mirror.py "
                         "(MIRRORS) nor a reason to have none (NOT_MIRRORED)")  # fmt: skip
    out: dict[str, list[tuple[Rule, tuple[str, ...]]]] = {"cpu": [], "gpu": []}
    for r in table:
        if r.name in MIRRORS:
            out.setdefault(r.family, []).append(MIRRORS[r.name])
    return {fam: tuple(rows) for fam, rows in out.items()}


def by_kind(rows: dict[str, tuple[tuple[Rule, tuple[str, ...]], ...]]
            ) -> dict[tuple[str, str], tuple[Rule, ...]]:
    """Per (family, OpSpec kind) only the rules that can take that kind, in table order:
    kernel() runs on every prediction and need not ask the pool rule about a conv."""
    return {(fam, kind): tuple(r for r, kinds in fam_rows if kind in kinds)
            for fam, fam_rows in rows.items() for kind in COMPUTE_KINDS}  # fmt: skip


# (rule, the op kinds it can take), first match wins: the dispatch table's rows, mirrored
ROWS = rows_of(TABLE)
RULES: dict[str, tuple[Rule, ...]] = {fam: tuple(r for r, _ in rows) for fam, rows in ROWS.items()}
_BY_KIND = by_kind(ROWS)


def kernel(family: str, s: OpSpec, m: Machine) -> Kernel:
    """The kernel codl-tvm's dispatch table picks for ``s`` on a ``family`` processor."""
    rules = _BY_KIND.get((family, s.kind))
    if rules is None:
        rules = RULES[family]  # KeyError for an unknown family, as the table lookup gives
    for rule in rules:
        got = rule(s, m)
        if got is not None:
            return got
    raise ValueError(f"no kernel of codl-tvm runs {s.kind} on a {family}")


# conv2d_transpose runs as the stride-1 conv over its dilated input (schedules.conv_transpose)
# on the direct (CPU) and tiled (GPU) conv kernels, never Winograd or the 1x1 GEMM
TRANSPOSED: dict[str, Rule] = {"cpu": _cpu_direct, "gpu": _gpu_tiled}


def transposed_kernel(family: str, s: OpSpec, m: Machine) -> Kernel:
    """The kernel a conv2d_transpose runs on, ``s`` being the conv over its dilated input
    (:func:`kernel`'s choice where the transposed row's kernel declines the shape)."""
    rule = TRANSPOSED.get(family)
    got = rule(s, m) if rule is not None else None
    return got if got is not None else kernel(family, s, m)
