"""Analytic blocking terms of the codl-tvm GPU kernels (CoDL Eq. 3; see ``blocking.py``).

Every term counts the work of the critical SM (waves of blocks over the ``m.active_sms`` SMs
that run them, or of the blocks resident at once) or a memory pass, so the time stays linear
in the learned unit times.
Mirrors ``schedules/gpu_conv.py`` (tiled implicit GEMM, split-K), ``schedules/gpu_winograd.py``
and ``schedules/gpu_rules.py`` (DLight Fallback / Matmul / Reduction).
"""

from __future__ import annotations

from functools import cache

from codl_tvm import tiling
from codl_tvm.predictor.mirror import (
    GEMV_K_THREADS,
    Machine,
    conv_shape,
    gemv_columns,
    gpu_plan,
    gpu_variant,
)
from codl_tvm.predictor.opspec import OpSpec


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def gpu_gemm(s: OpSpec, m: Machine) -> list[float]:
    """DLight Matmul as implicit GEMM: 64 OC x 32 pixels per block, K loop per block."""
    blocks = _cdiv(s.OC, 64) * _cdiv(s.out_h * s.out_w, 32)
    k = _cdiv(s.reduction, 16) * 16
    return [_cdiv(blocks, m.active_sms) * k, blocks * k, blocks]


# Occupancy: blocks resident on one SM at once, from the tile's threads and an estimate of
# its registers, against the SM's limits (``Machine.gpu_sm_threads``, ``gpu_sm_registers``:
# detected on the target, ``profiler.machine_facts``).
REGS_OVERHEAD = 24  # addresses, loop counters, predicates of a thread besides its tiles


def resident_blocks(t: tiling.Tile, m: Machine) -> int:
    """Thread blocks of tile ``t`` an SM runs at once (thread and register limits)."""
    regs = t.tm * t.tn + t.tm + t.tn + REGS_OVERHEAD  # accumulators + operand registers
    return max(1, min(m.gpu_sm_threads // t.threads, m.gpu_sm_registers // (t.threads * regs)))


@cache
def smem_store_wavefronts(t: tiling.Tile) -> int:
    """Shared-memory store wavefronts of one block's K step (``gpu_conv._cooperative``).

    The weight tile ``[bk][bm]`` is stored with lanes consecutive along K (coalesced OIHW
    reads), rows ``tiling.wt_row_stride`` apart; the im2col tile ``[bk][bn]`` with lanes along
    pixels. A warp store costs the most distinct addresses any one bank gets (unpadded
    weight rows: 16-way conflicts for bk 16, which made the 64x32 and 64x64 tiles' K steps
    1.5x and 2.2x a 32x128 step on the H100)."""
    total = 0
    stores = ((t.bk, t.bm, tiling.wt_row_stride(t), True), (t.bk, t.bn, t.bn, False))
    for rows, cols, stride, k_inner in stores:
        for first in range(0, rows * cols, 32):  # every warp store of the block
            banks: dict[int, set[int]] = {}
            for fused in range(first, min(first + 32, rows * cols)):
                k, c = (fused % rows, fused // rows) if k_inner else divmod(fused, cols)
                addr = k * stride + c
                banks.setdefault(addr % tiling.SMEM_BANKS, set()).add(addr)
            total += max(len(a) for a in banks.values())
    return total


def _pow2(x: int) -> bool:
    return x & (x - 1) == 0


GPU_TILED_TERMS = ("k_steps", "smem_stores", "fma", "written", "written_odd_planes",
                   "sum_reads", "second_launch", "sum_loads", "im2col_loads", "ragged_tile")


def gpu_tiled(s: OpSpec, m: Machine) -> list[float]:
    """gpu-conv-tiled(-split-k), per K step of ``bk`` on the critical SM: the step's latency
    (global loads -> shared -> barrier, no double buffering) once per wave of *resident*
    blocks; the shared-memory stores (bank conflicts) and the FMA issue per warp scheduler of
    all the SM's blocks in turn; for a window whose KH*KW or KW is not a power of two, the
    im2col loads serialised (nvcc keeps their div/mod bounds test as branches: one global
    round trip per load, SASS of the H100 kernels); a ragged pixel tile. Plus the output (or
    split-K partial) elements written and split-K's sum pass: its reads, its launch and the
    serial loop over the S partials of each thread."""
    variant = gpu_variant(m)
    row, split, k_split = gpu_plan(s, m, tiling.DEFAULT_VARIANT if variant == tiling.DECLINE
                                   else variant)  # fmt: skip
    t = row.tile
    pixels = s.out_h * s.out_w
    blocks = _cdiv(s.OC, t.bm) * _cdiv(pixels, t.bn) * split
    per_sm = _cdiv(blocks, m.active_sms)
    waves = _cdiv(blocks, m.active_sms * resident_blocks(t, m))
    steps = k_split // t.bk
    branchy = not (_pow2(s.KH * s.KW) and _pow2(s.KW))
    written = s.OC * pixels if split == 1 else blocks * t.bm * t.bn
    return [
        waves * steps,  # K-step latency
        per_sm * steps * smem_store_wavefronts(t),  # shared-memory stores
        # FMA issue over the SM's warp schedulers
        per_sm * steps * (t.threads // 32) * t.bk * t.tm * t.tn / m.gpu_warp_schedulers,
        # outputs / partial sums written, apart for output planes of odd length: a plane
        # that starts off a 32-byte sector costs more per element (H100, one device call:
        # 1266 planes of 53x53 21.9 us, 52x53 13.7, 52x52 11.6; SASS has the same scalar
        # STG.E stores for both, so it is the memory system's, not the instructions'). Only
        # split == 1 writes output planes from the tile epilogue: split-K's pass 1 writes
        # its partials to planes padded to whole pixel tiles (``np_``, YOLO 13x13: 192
        # floats, sector-aligned) and pass 2 one output element per thread, coalesced
        float(written) * (split > 1 or pixels % 2 == 0),
        float(written) * (split == 1 and pixels % 2 == 1),
        float(s.OC * pixels * split) if split > 1 else 0.0,  # sum pass reads
        float(split > 1),  # second launch
        float(split) if split > 1 else 0.0,  # sum pass: S dependent loads per thread
        waves * steps * (t.bk * t.bn // t.threads) * branchy,  # serialised im2col loads
        waves * steps * (pixels % t.bn != 0),  # ragged pixel tile
    ]


GPU_WINOGRAD_TERMS = ("fma", "input_transform", "weight_transform", "output_transform",
                      "k_steps", "k_steps_dram")  # fmt: skip


def gpu_winograd(s: OpSpec, m: Machine) -> list[float]:
    """gpu-winograd-2x2-3x3: the FMA issue of the critical SM (its blocks' warps x tm*tn FMAs
    per k over the padded IC, over the SM's warp schedulers: a 64x64 block of 8 warps issues
    twice what a 64x32 block of 4 does, as in :func:`gpu_tiled`), the input / weight / output
    transforms as memory passes, and the latency of the K steps (waves of *resident* blocks x
    K steps), again for the share of them whose ``U`` tile comes from DRAM. The GEMM is single
    buffered (``__syncthreads``, the ``U``/``V`` tile loads, ``__syncthreads``, the FMAs: each
    step waits on its loads) and reads ``U`` in K order, the order the weight transform wrote
    it in just before; once ``g`` + ``U`` (25 floats per (ic, oc)) outgrow the share of the L2
    a pass keeps (:data:`POOL_L2_SHARE`, as the pools), the early K rows are gone when the
    GEMM wants them and a step waits on DRAM, the share of the footprint beyond that L2 share
    (YOLO-V2's 13x13 layers, 31-157 MB: 0.82-0.86x under with the in-L2 step alone, whatever
    the OC split). Both shared tiles are stored along M / N (``weights_along_k=False``): no
    bank conflicts, no staging term (it fitted to zero once the FMAs were counted per warp).
    A ragged tile column (bounds-checked ``V`` loads) earns no term of its own (dropped alone:
    split -0.3 points, YOLO-V2 +1.2, POSENET -0.9). Its 4 launches are a constant: t0 holds
    them."""
    # the tile of gpu_winograd.make_tiling, also for rows profiled with the rule switched
    # differently than now (the predicate is the mirror's business, not the terms')
    row, th, tw = tiling.gpu_winograd_gemm(conv_shape(s))
    t = row.tile
    tiles = th * tw
    blocks = 16 * _cdiv(s.OC, t.bm) * _cdiv(tiles, t.bn)
    kp = _cdiv(s.IC, t.bk) * t.bk
    steps = _cdiv(blocks, m.active_sms * resident_blocks(t, m)) * (kp // t.bk)
    weights = 16 * s.IC * s.OC + s.IC * s.OC * 9  # g read and U written, in floats
    from_dram = max(0.0, 1.0 - POOL_L2_SHARE * m.l2_bytes / (4.0 * weights))
    return [
        # FMA issue over the SM's warp schedulers
        _cdiv(blocks, m.active_sms) * (t.threads // 32) * t.tm * t.tn * kp / m.gpu_warp_schedulers,
        s.IC * (s.H * s.W + 16 * tiles),  # input transform: read x, write V
        weights,  # weight transform (every call): read g, write U
        16 * s.OC * tiles + s.out_elems,  # output transform: read M, write the output
        steps,  # K-step latency, critical SM
        steps * from_dram,  # K steps waiting on U from DRAM
    ]


def gpu_thread(s: OpSpec, m: Machine) -> list[float]:
    """DLight Fallback: one output per thread, the window/reduction loop inside."""
    waves = _cdiv(s.out_elems, 1024 * m.active_sms)
    return [waves * s.reduction, s.out_elems * s.reduction, s.IC * s.H * s.W]


def _fallback_waves(s: OpSpec, m: Machine) -> int:
    """Waves of DLight Fallback's ``max_threads`` blocks over the SMs' resident threads."""
    blocks = _cdiv(s.out_elems, m.max_threads)
    return _cdiv(blocks, m.active_sms * max(1, m.gpu_sm_threads // m.max_threads))


GPU_ELEMENTWISE_TERMS = ("waves", "bytes_past_l2")


def gpu_elementwise(s: OpSpec, m: Machine) -> list[float]:
    """DLight Fallback of an elementwise op: one element per thread, no loop. Waves of
    resident threads, and the bytes read + written once the tensors no longer stay in the L2
    between calls (switch at half the L2, as :func:`gpu_gemv`): from ~4M elements the H100
    runs it at DRAM speed, which one slope for every size got 1.3-1.7x wrong."""
    moved = (s.IC * s.H * s.W + s.out_elems) * 4
    return [float(_fallback_waves(s, m)), moved * (moved > m.l2_bytes // 2)]


GPU_POOL_TERMS = ("waves", "read", "written", "read_from_dram", "written_to_dram")


def gpu_pool(s: OpSpec, m: Machine) -> list[float]:
    """DLight Fallback pool: one output per thread, the window unrolled (nvcc issues all its
    loads at once: SASS of the k3s2 max pool). Waves x window, the input bytes, the output
    bytes (the TIR keeps the accumulator in global memory: stored, reloaded, stored), and both
    again for the share of the footprint beyond ~40% of the L2 (21 MB on the H100): bytes
    past that come from DRAM, so the DRAM share is ``1 - 0.4 * L2 / footprint`` (a hinge in
    the bytes, not a step: the H100 sweep of 81x81 k2s2 pools at 500-1000 channels turns
    gradually from ~20 MB moved). An avg pool is two kernels (the sum into a workspace, then
    ``main_kernel_1`` divides it into the output): its footprint is the input, the workspace
    and the output."""
    read, written = s.IC * s.H * s.W * 4.0, s.out_elems * 4.0
    footprint = read + written * (2 if s.kind == "pool_avg" else 1)
    beyond = max(0.0, 1.0 - POOL_L2_SHARE * m.l2_bytes / max(footprint, 1.0))
    return [float(_fallback_waves(s, m) * s.reduction), read, written, read * beyond,
            written * beyond]  # fmt: skip


POOL_L2_SHARE = 0.4  # of the L2 that a pool's footprint can use before it streams from DRAM


def gpu_dense(s: OpSpec, m: Machine) -> list[float]:
    """DLight Fallback of a GEMV: one output column per thread, a serial, memory-latency-bound
    loop over IC. Measured on H100: a step is ~3x slower with a ragged last block (bounds
    check) and ~2x slower again once the weight no longer stays in L2 between calls."""
    steps = _cdiv(s.OC, 1024 * m.active_sms) * s.IC
    ragged = s.OC % 1024 != 0
    in_l2 = s.IC * s.OC * 4 <= m.l2_bytes
    return [steps * (not ragged), steps * (ragged and in_l2), steps * (ragged and not in_l2)]


SECTOR_BYTES = 32  # the unit of a GPU global-memory load


def gpu_gemv(s: OpSpec, m: Machine) -> list[float]:
    """DLight Reduction of a batch-1 dense ``x[1, K] @ W[K, N]``: blocks of ``tx`` output
    columns x 16 threads splitting K, each thread a serial loop of n = K/16 steps, then a
    cross-thread sum. Terms: the loop steps of the critical SM's resident blocks; the weight
    bytes the loads fetch (a row of ``tx`` columns still costs whole 32-byte sectors: a prime
    N gets ``tx = 1`` and 8x the traffic), from L2 or from memory; the steps again once the
    weight is beyond the L2 (each step then waits on memory); and the L2 round trips of a
    guarded loop. For a K that is not a multiple of 16 the loop keeps its bounds check and
    nvcc (13.0, sm_90) predicates the loads: n % 4 == 0 unrolls by 4 or 8 with one (two)
    round trips per 4 (8) steps, any other n by 2 or 4 with a round trip per 2 steps; small
    loops (n <= 36, or n % 4 == 2 up to 102) are fully unrolled and pay none (SASS; H100:
    46 ns a step at n = 256, 72-85 at n = 178 and 209). The weight-only GEMV stays in L2
    up to 3/4 of it: 4096x2048 (33.5 MB) runs at the in-L2 speed (11.5 us, 67 MB: 30.5 us)."""
    tx = gemv_columns(s.OC)
    blocks = s.OC // tx
    resident = max(1, min(m.gpu_sm_blocks, m.gpu_sm_threads // (tx * GEMV_K_THREADS)))
    n = _cdiv(s.IC, GEMV_K_THREADS)
    steps = _cdiv(blocks, m.active_sms * resident) * n
    fetched = s.IC * blocks * SECTOR_BYTES * _cdiv(4 * tx, SECTOR_BYTES)
    beyond = s.IC * s.OC * 4 > m.l2_bytes * 3 // 4
    unrolled = n <= 36 or (n % 4 == 2 and n <= 102)
    guarded = s.IC % GEMV_K_THREADS != 0 and not unrolled
    round_trips = steps * guarded * (1 if n % 4 == 0 else 2)  # per 4 steps
    return [steps, fetched * (not beyond), fetched * beyond, steps * beyond, round_trips]
