"""One dispatch table: (processor family, op kind, shape predicate) -> schedule rule.

The rows' names, families and op kinds, and their order, are ``tiling.dispatch_table.TABLE``
(shared with the latency predictor's mirror, which imports no TVM); this module attaches each
row's predicate and schedule.

Rules are tried in table order; the first whose family/op/predicate match and that
succeeds wins. A rule that cannot handle a PrimFunc raises and the next one is tried; when
none is left, DLight (GPU) or a plain/parallel loop nest (CPU) is used.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import tvm
from tvm import tirx
from tvm.s_tir import Schedule
from tvm.s_tir import dlight as dl

from .. import tiling
from ..tiling import GEMV_MAX_ROWS, GLOBAL_POOL_MIN_WINDOW, THIN_OC_MAX
from ..tiling.dispatch_table import TABLE, TableRow
from . import (
    conv_transpose,
    cpu_conv,
    cpu_gemm,
    cpu_group_conv,
    cpu_rules,
    cpu_winograd,
    gpu_conv,
    gpu_matmul,
    gpu_rules,
    gpu_winograd,
    prepack,
    vectors,
)
from .analysis import REDUCE, OpInfo, analyze, matmul_dims
from .blocking import Blocking
from .rebuild import Unsupported, inline_epilogue, rebuild
from .target_info import TargetInfo

Scheduled = tuple[tirx.PrimFunc, Blocking]
ApplyFn = Callable[[tirx.PrimFunc, OpInfo, tvm.target.Target, TargetInfo, str], Scheduled]


@dataclasses.dataclass(frozen=True)
class Rule:
    """A row of the dispatch table."""

    name: str
    family: str  # "cpu" | "gpu"
    ops: tuple[str, ...]
    when: Callable[[OpInfo, TargetInfo], bool]
    apply: ApplyFn


def _f32(info: OpInfo, _t: TargetInfo) -> bool:
    return info.dtype == "float32"


def _always(_info: OpInfo, _t: TargetInfo) -> bool:
    return True


def _thin_oc(info: OpInfo, _t: TargetInfo) -> bool:
    return info.conv is not None and info.conv.oc <= THIN_OC_MAX


def _global_pool(info: OpInfo, _t: TargetInfo) -> bool:
    return tuple(info.out_shape[2:]) == (1, 1) and info.reduce_size >= GLOBAL_POOL_MIN_WINDOW


def _small_m(info: OpInfo, _t: TargetInfo) -> bool:
    return len(info.out_shape) >= 2 and math.prod(info.out_shape[:-1]) <= GEMV_MAX_ROWS


# ---- CPU rules ------------------------------------------------------------------------


def _te_kernel(func, info, t, compute, schedule, last: str = "codl_unpack") -> Scheduled:
    """Rebuild ``func`` around ``compute``, schedule it, and inline the epilogue into the
    block ``last``."""
    new = rebuild(func, info.main_block, compute, 2)
    sch = Schedule(new)
    blocking = schedule(sch)
    _write_out(sch, last, t)
    if tiling.current_variants().cpu_prepack:
        prepack.offer(func, info.main_block, compute, schedule,
                      lambda s: _write_out(s, last, t))
    return sch.mod["main"], blocking


def _write_out(sch: Schedule, last: str, t: TargetInfo) -> None:
    """Inline the epilogue into the block ``last`` and vectorise its innermost loop where the
    schedule left it serial (``KernelVariants.cpu_vector_tails``)."""
    inline_epilogue(sch, last)
    if tiling.current_variants().cpu_vector_tails:
        vectors.vectorize_innermost(sch, last, t.lanes)


def cpu_direct(func, info, _target, t, name) -> Scheduled:
    c = info.conv
    return _te_kernel(
        func, info, t, cpu_conv.direct_compute(c, t),
        lambda sch: cpu_conv.schedule_direct(sch, c, t, name),
    )


def cpu_direct_transposed(func, info, _target, t, name) -> Scheduled:
    c = info.conv

    def schedule(sch: Schedule) -> Blocking:
        conv_transpose.inline_prologue(sch)
        return dataclasses.replace(cpu_conv.schedule_direct(sch, c, t, name),
                                   op="conv2d_transpose")

    compute = conv_transpose.transposed(c, info.input_dilation, cpu_conv.direct_compute(c, t))
    return _te_kernel(func, info, t, compute, schedule)


def cpu_gemm1x1(func, info, _target, t, name) -> Scheduled:
    c = info.conv
    return _te_kernel(
        func, info, t, cpu_gemm.gemm_compute(c, t),
        lambda sch: cpu_gemm.schedule_gemm(sch, c, t, name), cpu_gemm.last_block(c, t),
    )


def cpu_winograd_f23(func, info, _target, t, name) -> Scheduled:
    c = info.conv
    return _te_kernel(
        func, info, t, cpu_winograd.winograd_compute(c, t),
        lambda sch: cpu_winograd.schedule_winograd(sch, c, t, name),
    )


def cpu_grouped(func, info, _target, t, name) -> Scheduled:
    c = info.conv
    return _te_kernel(
        func, info, t, cpu_group_conv.grouped_compute(c, t),
        lambda sch: cpu_group_conv.schedule_grouped(sch, c, t, name),
    )


def cpu_matmul(func, info, _target, t, name) -> Scheduled:
    dims = matmul_dims(func)
    if dims is None:
        raise Unsupported("matmul operands are not (M,K) x (K,N) params")
    m, k, n, lead, batched = dims
    if batched:  # one matmul per index of the batch axes both operands lead with
        return _te_kernel(
            func, info, t, cpu_rules.batched_matmul_compute(lead, m, k, n, t),
            lambda sch: cpu_rules.schedule_matmul(sch, m, k, n, t, name, len(lead),
                                                  math.prod(lead)),
        )
    rows = math.prod(lead) * m  # batch axes in front of a 2-D weight are more rows
    scheduled = _te_kernel(
        func, info, t, cpu_rules.matmul_compute(rows, k, n, t, (*lead, m)),
        lambda sch: cpu_rules.schedule_matmul(sch, rows, k, n, t, name, len(lead)),
    )
    variants = tiling.current_variants()
    if rows <= GEMV_MAX_ROWS and variants.cpu_gemv_panels and variants.cpu_prepack:
        # the GEMV streams its weight as it is; its version for a constant weight reads it
        # packed into panels at load
        prepack.offer(func, info.main_block,
                      cpu_rules.gemv_panel_compute(rows, k, n, t, (*lead, m)),
                      lambda sch: cpu_rules.schedule_gemv_panels(sch, rows, n, t, name,
                                                                 len(lead)),
                      lambda s: _write_out(s, "codl_unpack", t))
    return scheduled


def cpu_pool(func, info, _target, t, name) -> Scheduled:
    sch = Schedule(func)
    blocking = cpu_rules.schedule_pool(sch, info, t, name)
    return sch.mod["main"], blocking


def cpu_parallel(func, info, _target, t, name) -> Scheduled:
    """Outer data-parallel loops of every block fused and parallel (injective blocks: all but
    the innermost; reductions: the spatial loops before the reduction loops)."""
    sch = Schedule(func)
    tasks = 1
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        loops = sch.get_loops(rv)
        n = _spatial_prefix(sch.get(rv), len(loops))
        if n >= 1:
            fused = sch.fuse(*loops[:n]) if n > 1 else loops[0]
            sch.parallel(fused)  # raises where a loop also drives a reduction
            tasks = max(tasks, int(sch.get(fused).extent))
    out = math.prod(info.out_shape) if info.out_shape else 1
    return sch.mod["main"], Blocking(
        algorithm="parallel-loops", processor="cpu", op=info.kind, output_size=out,
        block_shape={"elements": math.ceil(out / tasks)}, basic_unit_shape={"elements": 1},
        num_blocks=tasks, cores=t.cores, vector_lanes=t.lanes, grid={"parallel": tasks},
        rule=name,
    )


def _spatial_prefix(block, n_loops: int) -> int:
    """How many leading loops to run in parallel: a legalized block has one loop per iter
    var, spatial ones first."""
    kinds = [int(iv.iter_type) for iv in block.iter_vars]
    if REDUCE not in kinds:
        return n_loops - 1 if n_loops >= 2 else 0
    n = kinds.index(REDUCE)
    if n_loops != len(kinds) or any(k != REDUCE for k in kinds[n:]):
        return 0
    return n


# ---- GPU rules ------------------------------------------------------------------------


def _dlight(names: tuple[str, ...], algorithm: str | None = None) -> ApplyFn:
    def apply(func, info, target, t, rule) -> Scheduled:
        done = gpu_rules.apply_dlight(func, target, names)
        if done is None:
            raise Unsupported(f"no DLight rule of {names} applies")
        new, used = done
        algo = algorithm if algorithm and used == names[0] else f"dlight-{used}"
        return new, gpu_rules.gpu_blocking(new, info, t, algo, rule)

    return apply


def _gpu_global_pool(func, info, target, t, name) -> Scheduled:
    """DLight's Reduction for sums, else our cross-thread reduction (a max: on the H100 the
    one-thread-per-channel Fallback took 57 us for 79 channels of 24x24), else DLight's
    general reduction or Fallback. Both reductions run one block per output."""
    done = gpu_rules.apply_dlight(func, target, ("reduction",))
    new = done[0] if done is not None else gpu_rules.cross_thread_reduce(func, info)
    if new is not None:
        return new, gpu_rules.gpu_blocking(new, info, t, "global-reduction", name)
    return _dlight(("general_reduction", "fallback"))(func, info, target, t, name)


def _gpu_transposed(func, info, target, t, name) -> Scheduled:
    new, blocking = gpu_conv.apply(func, info, target, t, name)
    return new, dataclasses.replace(blocking, op="conv2d_transpose")


# each row's predicate and schedule, by the row's name in the table (``tiling.TABLE``: the
# order and the op kinds, shared with the predictor's dispatch mirror)
IMPLEMENTATIONS: dict[str, tuple[Callable[[OpInfo, TargetInfo], bool], ApplyFn]] = {
    "cpu-conv2d-gemm-1x1": (cpu_gemm.wins, cpu_gemm1x1),
    "cpu-conv2d-winograd": (cpu_winograd.wins, cpu_winograd_f23),
    "cpu-conv2d-direct-nchwc": (_f32, cpu_direct),
    "cpu-conv2d-transpose": (_f32, cpu_direct_transposed),
    "cpu-grouped-conv2d": (_f32, cpu_grouped),
    "cpu-pool2d": (_always, cpu_pool),
    "cpu-matmul": (_f32, cpu_matmul),
    "cpu-elementwise": (_always, cpu_parallel),
    # OC <= 4 (RGB outputs): one output per thread beat every GEMM tiling on the H100 (10% vs
    # 5% of peak on fast-style-transfer's last layer), the GEMM's M side being 3 rows
    "gpu-conv2d-thin-oc": (_thin_oc, _dlight(("fallback",), "direct")),
    # 3x3 s1 Winograd F(2x2,3x3) for IC >= 32: 1.02-2.35x over the tiled conv on the H100
    # (benchmarks/kernels.py build --gpu-winograd); KernelVariants(gpu_winograd=False) turns
    # it off
    "gpu-conv2d-winograd": (gpu_winograd.wins, gpu_winograd.apply),
    "gpu-conv2d-tiled": (_f32, gpu_conv.apply),
    "gpu-conv2d-transpose-tiled": (_f32, _gpu_transposed),
    "gpu-conv2d-implicit-gemm": (_always, _dlight(("matmul", "fallback"), "implicit-gemm")),
    "gpu-grouped-conv2d": (_always, _dlight(("fallback",), "depthwise-direct")),
    # a 1x1-output pool over a wide window (instance norm's mean, global average pooling): one
    # block per output reducing across its threads; Fallback gave each output one thread and
    # a serial loop over the window (307200 elements for fast-style-transfer's first norm)
    "gpu-global-pool2d": (_global_pool, _gpu_global_pool),
    "gpu-pool2d": (_always, _dlight(("fallback",), "pool")),
    # batch-1 dense x[1, K] @ W[K, N]: DLight's GEMV rules decline the K-outer weight, and its
    # Fallback gives each thread one column and a serial loop over all of K (168 us for
    # 1024 -> 1000 on the H100); Reduction splits K over 16 threads and reduces across them
    "gpu-gemv": (_small_m,
                 _dlight(("gemv", "low_batch_gemv", "matmul", "reduction", "fallback"), "gemv")),
    # more rows than a GEMV's (transformers' dense layers, attention's batched matmuls): the
    # conv's tiled GEMM (KernelVariants.gpu_matmul; "dlight" leaves them to the next row)
    "gpu-matmul-tiled": (_f32, gpu_matmul.apply),
    "gpu-matmul": (_always, _dlight(("matmul", "fallback"), "gemm")),
    "gpu-elementwise": (_always, _dlight(("fallback",), "elementwise")),
}


def build_rules(table: tuple[TableRow, ...] = TABLE) -> tuple[Rule, ...]:
    """The rules of ``table``'s rows, in its order (a row without an implementation is an
    error: the table is the one list of rules)."""
    missing = [row.name for row in table if row.name not in IMPLEMENTATIONS]
    if missing:
        raise ValueError(f"dispatch rows without a schedule: {missing}")
    return tuple(Rule(row.name, row.family, row.ops, *IMPLEMENTATIONS[row.name]) for row in table)


RULES: tuple[Rule, ...] = build_rules()

GPU_FALLBACK = ("matmul", "gemv", "reduction", "general_reduction", "fallback")


def _fallback(func, info, target, t) -> Scheduled:
    if t.family == "gpu":
        return _dlight(GPU_FALLBACK)(func, info, target, t, "dlight-fallback")
    for rule_cls in (dl.cpu.GEMV, dl.cpu.Reduction):
        try:
            sch = rule_cls().apply(func, target, False)
        except Exception:  # noqa: BLE001 - a rule that cannot schedule the func is skipped
            sch = None
        if sch is not None:
            sch = sch[0] if isinstance(sch, list) else sch
            out = math.prod(info.out_shape) if info.out_shape else 1
            return sch.mod["main"], Blocking(
                algorithm=f"dlight-{rule_cls.__name__.lower()}", processor="cpu", op=info.kind,
                output_size=out, block_shape={"elements": out}, basic_unit_shape={"elements": 1},
                num_blocks=1, cores=t.cores, vector_lanes=t.lanes, rule="dlight-fallback",
            )
    try:  # BERT's batched attention matmuls, conv3d, cropping transposed convs ...
        return cpu_parallel(func, info, target, t, "cpu-generic-parallel")
    except Exception:  # noqa: BLE001 - a loop nest it cannot parallelise stays serial
        pass
    out = math.prod(info.out_shape) if info.out_shape else 1
    return func, Blocking(
        algorithm="plain", processor="cpu", op=info.kind, output_size=out,
        block_shape={"elements": out}, basic_unit_shape={"elements": 1}, num_blocks=1,
        cores=t.cores, vector_lanes=1, rule="plain",
    )


def select_rules(info: OpInfo, t: TargetInfo) -> list[Rule]:
    """Rows of the table matching ``info`` on ``t``, in order."""
    return [r for r in RULES if r.family == t.family and info.kind in r.ops and r.when(info, t)]


def schedule_func(
    func: tirx.PrimFunc, target: tvm.target.Target, t: TargetInfo
) -> tuple[tirx.PrimFunc, Blocking, list[str]]:
    """Schedule one PrimFunc; also returns why earlier matching rules were skipped."""
    info = analyze(func)
    skipped: list[str] = []
    for rule in select_rules(info, t):
        try:
            new, blocking = rule.apply(func, info, target, t, rule.name)
            return new, blocking, skipped
        except Exception as err:  # noqa: BLE001 - any rule failure means: try the next rule
            skipped.append(f"{rule.name}: {str(err).splitlines()[0][:200]}")
    new, blocking = _fallback(func, info, target, t)
    return new, blocking, skipped
