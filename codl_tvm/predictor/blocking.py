"""Analytic blocking of the codl-tvm kernels: the non-linear part of CoDL Eq. 3.

For every (processor, op kind) the schedule rules of ``codl_tvm.schedules`` fix how the
output is cut into parallel tasks (CPU) or thread blocks (GPU) and how much work one task
does. The functions here recompute those counts from an :class:`OpSpec` alone (the planner
has no PrimFunc) and return the *terms* whose learned coefficients are the basic-unit times:

``T = t0 + sum_k t_k * term_k``

Every term is "waves of tasks x work per task" or a parallel memory pass, so the model stays
linear in the unit times and the staircases (waves, register tiles, padded tiles) are exact.
Which kernel runs (and its block counts) comes from :mod:`codl_tvm.predictor.mirror`, the
mirror of the dispatch table; the terms are per algorithm (:data:`TERMS`). Mirrors:
``schedules/cpu_gemm.py`` (1x1 GEMM: ``mr`` channels x ``nv`` pixel vectors per register tile,
(pixel tile, OC block) tasks, input/weight packing per call), ``schedules/cpu_winograd.py``
(F(2x2,3x3): 16 batched GEMMs of ``pt`` tiles x ``ocb`` channels, input/weight/output
transforms), ``schedules/gpu_conv.py`` (tiled implicit GEMM: the shape-class tile, split-K
blocks on ``blockIdx.z`` and the second sum pass), ``schedules/gpu_winograd.py``
(F(2x2,3x3) on the GPU: 16 batched GEMMs on ``blockIdx.z`` with the tiled conv's default
tile table, three transform kernels), ``schedules/cpu_conv.py``
(``conv_tiles``: ``ocb`` channels x ``x_tile`` columns per task),
``schedules/cpu_rules.py`` (depthwise/pool: one task per (channel, row); gemv: column blocks
of ``2*lanes`` grouped 16 per task plus a scalar tail) and ``schedules/gpu_rules.py``
(DLight Fallback: one output per thread, 1024 threads per block; DLight Matmul, only under
``CODL_GPU_CONV=dlight``: 64 OC x 32 output pixels per 128-thread block).
"""

from __future__ import annotations

from collections.abc import Callable

from codl_tvm import tiling
from codl_tvm.predictor.mirror import (
    GEMV_K_THREADS,
    GPU_GEMV,
    GPU_WINOGRAD,
    Machine,
    conv_shape,
    gemv_columns,
    gpu_plan,
    gpu_variant,
    kernel,
)
from codl_tvm.predictor.opspec import OpSpec

__all__ = ["ANALYTIC", "TERMS", "Machine", "kernel_kind", "model_algorithm", "terms"]


# CPU caches (Intel Sapphire Rapids, Intel 64 and IA-32 Architectures Optimization Reference
# Manual, Golden Cove: 48 KiB L1D and 2 MiB L2 per core, each core two hyperthreads).
CPU_L1_BYTES = 48 << 10
CPU_L2_BYTES_PER_CORE = 2 << 20
CPU_SMT = 2  # hardware threads per core: the guest's vCPUs are hyperthreads of half as many cores


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _over_l1(task_bytes: int) -> bool:
    """A task's operand panel no longer stays in L1 across its reduction loop."""
    return task_bytes > CPU_L1_BYTES


def _streamed(pass_bytes: int, m: Machine) -> float:
    """Bytes per core of a parallel pass whose working set exceeds the cores' caches: its
    passes stream from L3/DRAM at a lower rate, 0 otherwise. The limit is
    ``m.cpu_stream_bytes`` (learned from the samples), else the L2s of ``cores / CPU_SMT``
    Sapphire Rapids cores: the H100 machine's pool and elementwise passes change regime
    between 12 and 24 MB (16 vCPUs)."""
    limit = m.cpu_stream_bytes or max(1, m.cores // CPU_SMT) * CPU_L2_BYTES_PER_CORE
    return pass_bytes / m.cores if pass_bytes > limit else 0.0


def _padded_in(s: OpSpec, out_w: int) -> tuple[int, int]:
    """Rows, cols of the padded input the CPU kernels copy (whole register tiles)."""
    d = s.dilation
    return (s.out_h - 1) * s.SH + (s.KH - 1) * d + 1, (out_w - 1) * s.SW + (s.KW - 1) * d + 1


def cpu_conv(s: OpSpec, m: Machine) -> list[float]:
    """direct-nchwc: tasks (ocb channels, 1 row, x_tile cols); work = IC*KH*KW vector FMAs
    per (x_tile x ocb/lanes) register tile; plus pad, weight-pack and unpack passes."""
    vecs = 2 if s.OC > m.lanes else 1
    ocb = m.lanes * vecs
    xt = max(1, min((m.vector_regs - vecs - 2) // vecs, 14, s.out_w))
    ocp = _cdiv(s.OC, ocb)
    owp = _cdiv(s.out_w, xt) * xt
    waves = _cdiv(ocp * s.out_h * _cdiv(s.out_w, xt), m.cores)
    hp, wp = _padded_in(s, owp)
    red = s.reduction
    return [
        waves * red * xt * vecs,  # FMAs on the critical core
        waves * xt * vecs,  # accumulator init + write-back per task
        s.IC * hp * wp / m.cores,  # padded input copy
        ocp * ocb * red / m.cores,  # weight pack (every call)
        s.out_elems / m.cores,  # unpack
        # weight vector loads of the critical core once a task's packed weight panel
        # (ocb x IC*KH*KW floats) spills L1: they come from L2 on every register tile
        waves * red * vecs * _over_l1(ocb * red * 4),
    ]


def cpu_gemm(s: OpSpec, m: Machine) -> list[float]:
    """gemm-1x1: tasks (mr channels, nv*lanes pixels); work = IC x mr x nv vector FMAs per
    task; plus the input pack (padded pixels), weight pack (every call) and unpack passes."""
    c = conv_shape(s)
    mr, nv = tiling.gemm_tiles(c, m)
    np_ = nv * m.lanes
    pp, ocp = _cdiv(s.out_h * s.out_w, np_), _cdiv(s.OC, mr)
    waves = _cdiv(pp * ocp, m.cores)
    return [
        waves * s.IC * mr * nv,  # FMAs on the critical core
        waves * mr * nv,  # accumulator init + write-back per task
        s.IC * pp * np_ / m.cores,  # input pack
        ocp * mr * s.IC / m.cores,  # weight pack
        s.out_elems / m.cores,  # unpack
        waves,  # per task: its panels' first touch (an IC x np input panel, IC x mr weights)
    ]


def cpu_winograd(s: OpSpec, m: Machine) -> list[float]:
    """winograd-2x2-3x3: 16 x OC blocks x tile blocks GEMM tasks of IC x pt x ocb/lanes
    vector FMAs; input, weight (every call) and output transforms as parallel passes."""
    c = conv_shape(s)
    ocb, pt = tiling.winograd_tiles(c, m)
    th, tw = tiling.winograd_grid(c)
    pp, ocp, vecs = _cdiv(th * tw, pt), _cdiv(s.OC, ocb), ocb // m.lanes
    waves = _cdiv(16 * ocp * pp, m.cores)
    return [
        waves * s.IC * pt * vecs,  # FMAs on the critical core
        waves * pt * vecs,  # accumulator init + write-back per task
        16 * s.IC * pp * pt / m.cores,  # pad + input transform
        16 * ocp * ocb * s.IC / m.cores,  # weight transform
        16 * ocp * ocb * th * tw / m.cores + s.out_elems / m.cores,  # output transform, unpack
        # weight vector loads once a task's IC x ocb weight panel spills L1 (as cpu_conv)
        waves * s.IC * vecs * _over_l1(s.IC * ocb * 4),
    ]


def cpu_depthwise(s: OpSpec, m: Machine) -> list[float]:
    """depthwise-direct: one task per (channel, row), output columns in SIMD lanes."""
    vx = _cdiv(s.out_w, m.lanes)
    waves = _cdiv(s.OC * s.out_h, m.cores)
    hp, wp = _padded_in(s, vx * m.lanes)
    return [
        waves * vx * s.reduction,
        waves * vx,
        s.IC * hp * wp / m.cores,
        s.out_elems / m.cores,
    ]


def cpu_pool(s: OpSpec, m: Machine) -> list[float]:
    """pool: one task per (channel, row), scalar window loop per output; a fixed cost per
    row task (many channels of short rows: 15x15x3537 avg pools ~5x slower per output);
    input + output streamed beyond the L2s."""
    waves = _cdiv(s.OC * s.out_h, m.cores)
    return [
        waves * s.out_w * s.reduction,  # window elements on the critical core
        waves * s.out_w,  # outputs (and the avg pool's divide) on the critical core
        waves,  # per row task
        _streamed((s.IC * s.H * s.W + s.out_elems) * 4, m),
    ]


def cpu_dense(s: OpSpec, m: Machine) -> list[float]:
    """gemv: 16-column-block tasks streaming the weight rows, scalar tail columns."""
    vb = 2 * m.lanes if s.OC >= 2 * m.lanes else m.lanes
    blocks = s.OC // vb
    per_task = max(d for d in range(1, 17) if blocks % d == 0) if blocks else 1
    tasks = blocks // per_task
    tail = s.OC - blocks * vb
    return [
        _cdiv(tasks, m.cores) * per_task * (vb // m.lanes) * s.IC if tasks else 0.0,
        _cdiv(tail, m.cores) * s.IC,
        float(bool(tail)),
        s.IC * s.OC / m.cores,
        _streamed(s.IC * s.OC * 4, m),  # the weight streamed beyond the L2s
    ]


def cpu_eltwise(s: OpSpec, m: Machine) -> list[float]:
    """parallel-loops over (channel, row), a row per task; read + write streamed beyond the
    L2s (41 M elements: 2.5x slower per element than 8 M)."""
    waves = _cdiv(s.OC * s.out_h, m.cores)
    return [waves * s.out_w, waves, _streamed(2 * s.out_elems * 4, m)]


def gpu_gemm(s: OpSpec, m: Machine) -> list[float]:
    """DLight Matmul as implicit GEMM: 64 OC x 32 pixels per block, K loop per block."""
    blocks = _cdiv(s.OC, 64) * _cdiv(s.out_h * s.out_w, 32)
    k = _cdiv(s.reduction, 16) * 16
    return [_cdiv(blocks, m.sms) * k, blocks * k, blocks]


# Occupancy: blocks resident on one SM at once, from the tile's threads and an estimate of
# its registers. Machine fields ``sm_threads`` / ``sm_registers`` where the Machine has them;
# otherwise two blocks of the largest size (CUDA sm_80/sm_90: 2048 threads) and the 64 K
# 32-bit registers every CUDA SM since sm_50 has.
REGS_OVERHEAD = 24  # addresses, loop counters, predicates of a thread besides its tiles


def resident_blocks(t: tiling.Tile, m: Machine) -> int:
    """Thread blocks of tile ``t`` an SM runs at once (thread and register limits)."""
    sm_threads = getattr(m, "sm_threads", 2 * m.max_threads)
    sm_regs = getattr(m, "sm_registers", 1 << 16)
    regs = t.tm * t.tn + t.tm + t.tn + REGS_OVERHEAD  # accumulators + operand registers
    return max(1, min(sm_threads // t.threads, sm_regs // (t.threads * regs)))


def gpu_tiled(s: OpSpec, m: Machine) -> list[float]:
    """gpu-conv-tiled(-split-k): waves of (bm x bn x split) blocks x per-thread FMAs of one
    K partition, the shared-memory staging of every block, split-K's sum pass, and the K
    steps of a ragged pixel tile (its bounds-checked im2col loads: ~2x slower steps)."""
    variant = gpu_variant()
    row, split, k_split = gpu_plan(s, m, tiling.DEFAULT_VARIANT if variant == tiling.DECLINE
                                   else variant)  # fmt: skip
    t = row.tile
    pixels = s.out_h * s.out_w
    blocks = _cdiv(s.OC, t.bm) * _cdiv(pixels, t.bn) * split
    ragged = pixels % t.bn != 0
    return [
        _cdiv(blocks, m.sms) * t.tm * t.tn * k_split,  # FMAs of a thread, critical SM
        blocks * (t.bm + t.bn) * k_split,  # global -> shared staging, all blocks
        float(s.OC * pixels * split) if split > 1 else 0.0,  # sum pass reads
        float(split > 1),  # second launch
        # K steps of the critical SM's resident blocks when the pixel tile is ragged
        _cdiv(blocks, m.sms * resident_blocks(t, m)) * (k_split // t.bk) * ragged,
    ]


def gpu_winograd(s: OpSpec, m: Machine) -> list[float]:
    """gpu-winograd-2x2-3x3: waves of the 16 batched GEMMs' (bm x bn) blocks x per-thread FMAs
    over the padded IC, their shared-memory staging, the input / weight / output transforms
    as memory passes, and the latency of the K steps (waves of *resident* blocks x K steps),
    twice over for a ragged tile column (bounds-checked loads). Its 4 launches are a
    constant: t0 holds them."""
    # the tile of gpu_winograd.make_plan, also for rows profiled with the rule switched
    # differently than now (the predicate is the mirror's business, not the terms')
    row, th, tw = tiling.gpu_winograd_gemm(conv_shape(s))
    t = row.tile
    tiles = th * tw
    blocks = 16 * _cdiv(s.OC, t.bm) * _cdiv(tiles, t.bn)
    kp = _cdiv(s.IC, t.bk) * t.bk
    steps = _cdiv(blocks, m.sms * resident_blocks(t, m)) * (kp // t.bk)
    return [
        _cdiv(blocks, m.sms) * t.tm * t.tn * kp,  # FMAs of a thread, critical SM
        blocks * (t.bm + t.bn) * kp,  # global -> shared staging, all blocks
        s.IC * (s.H * s.W + 16 * tiles),  # input transform: read x, write V
        16 * s.IC * s.OC + s.IC * s.OC * 9,  # weight transform (every call): read g, write U
        16 * s.OC * tiles + s.out_elems,  # output transform: read M, write the output
        steps,  # K-step latency, critical SM
        steps * (tiles % t.bn != 0),  # ragged tile column
    ]


def gpu_thread(s: OpSpec, m: Machine) -> list[float]:
    """DLight Fallback: one output per thread, the window/reduction loop inside."""
    waves = _cdiv(s.out_elems, 1024 * m.sms)
    return [waves * s.reduction, s.out_elems * s.reduction, s.IC * s.H * s.W]


def gpu_dense(s: OpSpec, m: Machine) -> list[float]:
    """DLight Fallback of a GEMV: one output column per thread, a serial, memory-latency-bound
    loop over IC. Measured on H100: a step is ~3x slower with a ragged last block (bounds
    check) and ~2x slower again once the weight no longer stays in L2 between calls."""
    steps = _cdiv(s.OC, 1024 * m.sms) * s.IC
    ragged = s.OC % 1024 != 0
    in_l2 = s.IC * s.OC * 4 <= m.l2_bytes
    return [steps * (not ragged), steps * (ragged and in_l2), steps * (ragged and not in_l2)]


MAX_RESIDENT_BLOCKS = 32  # CUDA's limit of resident blocks per SM (sm_50 to sm_90)
SECTOR_BYTES = 32  # the unit of a GPU global-memory load


def gpu_gemv(s: OpSpec, m: Machine) -> list[float]:
    """DLight Reduction of a batch-1 dense ``x[1, K] @ W[K, N]``: blocks of ``tx`` output
    columns x 16 threads splitting K, each thread a serial loop of K/16 steps, then a
    cross-thread sum. Terms: the loop steps of the critical SM's resident blocks; the weight
    bytes the loads fetch (a row of ``tx`` columns still costs whole 32-byte sectors: a prime
    N gets ``tx = 1`` and 8x the traffic), from L2 or from memory; the steps again once the
    weight is beyond the L2 (each step then waits on memory); and the blocks' reductions. The
    L2 regime switches at half the L2: the H100's is two partitions, and the samples turn at
    20-40 MB of weights."""
    tx = gemv_columns(s.OC)
    blocks = s.OC // tx
    resident = max(1, min(MAX_RESIDENT_BLOCKS, 2 * m.max_threads // (tx * GEMV_K_THREADS)))
    steps = _cdiv(blocks, m.sms * resident) * _cdiv(s.IC, GEMV_K_THREADS)
    fetched = s.IC * blocks * SECTOR_BYTES * _cdiv(4 * tx, SECTOR_BYTES)
    beyond = s.IC * s.OC * 4 > m.l2_bytes // 2
    return [steps, fetched * (not beyond), fetched * beyond, steps * beyond, blocks]


# (processor family, model algorithm) -> terms; the fixed launch cost t0 is added by the model
TERMS: dict[tuple[str, str], Callable[[OpSpec, Machine], list[float]]] = {
    ("cpu", "gemm-1x1"): cpu_gemm,
    ("cpu", "winograd-2x2-3x3"): cpu_winograd,
    ("cpu", "direct-nchwc"): cpu_conv,
    ("cpu", "depthwise-direct"): cpu_depthwise,
    ("cpu", "group-direct"): cpu_depthwise,
    ("cpu", "pool"): cpu_pool,
    ("cpu", "gemv"): cpu_dense,
    ("cpu", "parallel-loops"): cpu_eltwise,
    ("gpu", "direct"): gpu_thread,
    ("gpu", "gpu-conv-tiled"): gpu_tiled,
    ("gpu", "implicit-gemm"): gpu_gemm,
    ("gpu", GPU_WINOGRAD): gpu_winograd,
    ("gpu", "depthwise-direct"): gpu_thread,
    ("gpu", "pool"): gpu_thread,
    ("gpu", "elementwise"): gpu_thread,
    ("gpu", "dlight-fallback"): gpu_dense,  # samples taken before the GEMV rule (session 2)
    ("gpu", GPU_GEMV): gpu_gemv,
}
# a label whose kernel shares another's model (same kernel, one term more or less)
SAME_MODEL = {"gpu-conv-tiled-split-k": "gpu-conv-tiled"}
# algorithms (as the samples' ``algorithm`` column names them) whose blocking is modelled above
ANALYTIC: dict[str, frozenset[str]] = {
    fam: frozenset({a for f, a in TERMS if f == fam} | {k for k, v in SAME_MODEL.items()
                                                        if (fam, v) in TERMS})
    for fam in ("cpu", "gpu")
}
# algorithms with one model per filter-size variant (CoDL: one model per filter algorithm)
BY_FILTER = frozenset({"direct-nchwc", "gpu-conv-tiled", "implicit-gemm"})


def model_algorithm(algorithm: str) -> str:
    """The algorithm whose model (and terms) a kernel of ``algorithm`` uses."""
    return SAME_MODEL.get(algorithm, algorithm)


def variant(s: OpSpec) -> str:
    """``k1`` / ``kn``: CoDL keeps one model per filter-size algorithm."""
    return "k1" if s.KH * s.KW == 1 else "kn"


def kernel_kind(s: OpSpec) -> str:
    """Kind whose kernel actually runs: a one-group depthwise part is a plain conv."""
    return "conv2d" if s.kind == "depthwise" and s.groups == 1 else s.kind


def terms(family: str, s: OpSpec, m: Machine, algorithm: str | None = None) -> list[float]:
    """``[1, term_1, ...]`` of ``s`` run by the ``algorithm`` kernel (default: the one the
    dispatch table picks) on a ``family`` processor."""
    algo = model_algorithm(algorithm or kernel(family, s, m).algorithm)
    fn = TERMS.get((family, algo))
    if fn is None:
        raise ValueError(f"no blocking rule for the {algo} kernel of {s.kind} on a {family}")
    return [1.0, *fn(s, m)]


def recorded_terms(s: OpSpec, block: int, unit: int, cores: int) -> list[float]:
    """Eq. 3 from a blocking recorded in the samples (kernels this module does not model):
    ``waves * units`` steps whose time is linear in the sub-op's (H, W, IC, OC)."""
    size = block or _cdiv(s.out_elems, cores)
    n = _cdiv(_cdiv(s.out_elems, size), cores) * _cdiv(size, unit)
    return [1.0, n, n * s.out_h, n * s.out_w, n * s.reduction, n * s.OC]
