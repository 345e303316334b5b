"""Blocking terms of the CPU's streaming kernels: pooling, batch-1 dense (GEMV) and
elementwise passes (CoDL Eq. 3; see ``blocking.py``), and the cache and TLB regimes a parallel
pass crosses (split off ``cpu_terms``, whose
conv kernels take :func:`_l2s_bytes` from here). Mirrors ``schedules/cpu_rules.py``.
"""

from __future__ import annotations

import math

from codl_tvm import tiling
from codl_tvm.predictor.gpu_terms import _cdiv
from codl_tvm.predictor.mirror import (
    Machine,
    eltwise_gathered_passes,
    gemv_blocks_per_task,
)
from codl_tvm.predictor.opspec import OpSpec

# 4 KiB pages (TVM's allocations do not ask for huge pages) and the second-level TLB's
# ``Machine.cpu_stlb_entries``: a GEMV pass over more pages than it reaches misses on every
# page (on the reference machine, a KVM guest, a two-level page walk; its samples step between
# 2441 and 2712 pages, and its documented 2048 entries fit them as well as 2560).
# The last-level cache is ``Machine.cpu_l3_bytes``.
CPU_PAGE_BYTES = 4096
STLB_WALK_LINES = 4  # a page walk of a GEMV row visit, in line times (17 ns / 4.2 ns)


def _l2s_bytes(m: Machine) -> int:
    """The L2s of the ``cores / cpu_smt`` physical cores the pool's workers run on."""
    return max(1, m.cores // m.cpu_smt) * m.cpu_l2_bytes_per_core


def _stream_limit(m: Machine) -> int:
    """Where a parallel pass starts streaming: learned (``m.cpu_stream_bytes``) or the L2s."""
    return m.cpu_stream_bytes or _l2s_bytes(m)


def _streamed(pass_bytes: int, m: Machine) -> float:
    """Bytes per core of a parallel pass whose working set exceeds the cores' caches: its
    passes stream from L3/DRAM at a lower rate, 0 otherwise. The limit is
    ``m.cpu_stream_bytes`` (learned from the samples), else the L2s of ``cores / cpu_smt``
    Sapphire Rapids cores: the H100 machine's pool and elementwise passes change regime
    between 12 and 24 MB (16 vCPUs)."""
    return pass_bytes / m.cores if pass_bytes > _stream_limit(m) else 0.0


def _streamed_excess(pass_bytes: int, m: Machine) -> float:
    """Bytes per core of a parallel pass beyond the cores' caches (the limit of
    :func:`_streamed`), a hinge: TVM's static chunks hand every worker the same slice of the
    pass on every call, so each core's L2 still holds about its size of the two workers'
    slices and only the excess streams from L3. The pools' time per byte rises gradually
    from 16 MB (the 8 cores' L2s, the limit the samples now pick): 256x256x64 (20 MB) ran
    0.55-0.76x the step model at 24 MB, and 1.2-1.3x it at 16 MB."""
    return max(0.0, pass_bytes - _stream_limit(m)) / m.cores


def cpu_pool(s: OpSpec, m: Machine) -> list[float]:
    """pool: one task per (channel, row), the window unrolled inside the row loop, which LLVM
    vectorizes (short rows and remainders scalar: 15x15x3537 avg pools ~5x slower per
    output; a stride-1 remainder 4 wide); the index arithmetic of rows whose input width is
    not a power of two; the input + output beyond the L2s streamed (:func:`_streamed_excess`).
    (A fixed cost per row task fitted to 0 for max pools and moved nothing for avg: left out.)"""
    waves = _cdiv(s.OC * s.out_h, m.cores)
    ow, red = s.out_w, s.reduction
    # LLVM's loop vectorizer on the row loop: a known trip count below ``m.llvm_min_trip``
    # stays scalar; otherwise vectors of ``m.llvm_vector_floats`` (the target's preferred
    # width: 8 on x86 with AVX-512, which prefers 256-bit vectors), the rest scalar
    vf = min(m.lanes, m.llvm_vector_floats)
    vec = 0 if ow < m.llvm_min_trip else ow // vf
    rem = ow - vec * vf
    # a stride-1 row's remainder past the 8-wide vectors runs 4 wide where 4 are left
    # (contiguous loads; 64x64 k2s1, 63 outputs: 6 ymm + 3 xmm + 3 scalar; 23x23 avg k2s1, 22:
    # 5 xmm + 2 scalar); at stride 2 (a vpermps pair per load) the remainder stays scalar
    epi = rem // 4 if vec and s.SW == 1 else 0
    # TVM narrows the pool's indices to int32; unless the input width is a power of two
    # (64, 128, 256: strength-reduced to one pointer, constant displacements) LLVM versions
    # each row on an int32 overflow check and recomputes every vector load's address in int32
    # (leal + movslq): one per window row at stride 2 (the kx offsets fold into the
    # displacement of the 16-float load that vpermps splits), one per window step at stride 1
    # (29x29 k3s1: 37 sign extensions for 36 vmaxps; 104x104 k2s2: 17 for 32; 128x128: 1)
    index_loads = s.KH * (1 if s.SW > 1 else s.KW) * (s.W & (s.W - 1) != 0)
    return [
        waves * (vec + epi) * red,  # vector window steps on the critical core
        waves * (rem - 4 * epi) * red,  # scalar window steps (short rows, remainders)
        waves * ow,  # outputs (and the avg pool's divide) on the critical core
        waves * (vec + epi) * index_loads,  # int32 address recomputations
        _streamed_excess((s.IC * s.H * s.W + s.out_elems) * 4, m),
    ]


def cpu_dense(s: OpSpec, m: Machine) -> list[float]:
    """gemv: tasks of up to 16 column blocks streaming the weight rows (every core a task
    once the weight is large), scalar tail columns. A parallel loop of one task compiles to
    serial code, so a fork-join is paid only by a main part of several tasks and by a tail.
    Beyond the second-level TLB's reach every page a pass touches misses. Rows of an OC not
    a multiple of 16 start off a 64-byte line: their vector loads split lines."""
    vb = tiling.matmul_vector_block(s.OC, m.lanes)
    blocks = s.OC // vb
    per_task = gemv_blocks_per_task(s, m)
    tasks = blocks // per_task
    tail = s.OC - blocks * vb
    waves = _cdiv(tasks, m.cores) if tasks else 0
    row_bytes = min(4 * s.OC, CPU_PAGE_BYTES)  # of a weight row's page that a pass touches
    stlb_miss = s.IC * row_bytes > m.cpu_stlb_entries * CPU_PAGE_BYTES
    lines = per_task * (vb // m.lanes)  # 64-byte lines a task reads of each weight row
    # rows are 4*OC bytes apart (b[k, j], 64-byte aligned base): unless 16 | OC most rows start
    # off a line, so each 64-byte vfmadd231ps load of a row is a cache-line split and a visit
    # of `lines` loads spans lines + 1 lines (fraction of misaligned rows: 1 - gcd(OC%16, 16)/16)
    off = s.OC % 16
    split = 1.0 - math.gcd(off, 16) / 16 if off else 0.0
    return [
        # vector loads + FMAs, critical thread; a split load takes two L1 accesses
        waves * lines * (1 + split) * s.IC,
        _cdiv(tail, m.cores) * s.IC,  # scalar tail column walks
        float(bool(tail)),  # the tail's fork-join
        float(tasks > 1),  # the main part's fork-join (one task: serial code, no launch)
        # per task of the critical worker (static chunks of ceil(tasks/16) tasks): each task
        # calls TVMBackendAllocWorkspace/FreeWorkspace for its accumulator tile (in the task
        # loop of the compiled parallel lambda), restarts a row-strided stream and writes back
        # its 32 x per_task outputs; fitted 1.1 us, more than those calls alone should cost
        # (how it splits between them was not measured)
        waves,
        s.IC * s.OC / m.cores,  # the weight, over all cores
        # past the STLB's reach, per row visit of the critical thread: the weight comes from
        # L3/DRAM as demand misses (no L2 residency across calls; the L2 streamer stops at
        # each 4 KiB page) and each visit's page needs a walk. Walks and line fetches of
        # different rows overlap out of order, so a visit costs the longer of its page walk
        # (~17 ns: STLB_WALK_LINES line times; 4096..25088 x 2867, 3 lines) and its lines
        # (~4.2 ns each with both hyperthreads streaming: x2048, x4096 at 4.0-4.3 ns)
        waves * s.IC * max(lines + split, STLB_WALK_LINES * row_bytes / CPU_PAGE_BYTES)
        * stlb_miss,
    ]


CPU_ELTWISE_TERMS = ("row_elements", "gathered_rows", "streamed_bytes", "dram_bytes")


def cpu_eltwise(s: OpSpec, m: Machine) -> list[float]:
    """parallel-loops over (channel, row), a row per task (two passes: add, then ReLU). Where
    LLVM fully unrolls a short row (:func:`mirror.eltwise_gathered_passes`) it vectorizes
    the loop over rows instead, with 8-wide gathers and scatters at the row stride (17 columns:
    58 ns a row, 50 columns: 30). Read + write streamed beyond the L2s (41 M elements: 2.5x
    slower per element than 8 M) and, the part beyond the last-level cache, from DRAM (a
    hinge: 223x223x826's time per byte rises from 8 us/MB at 99 MB to 19 at 328 MB; the step
    at the LLC missed 9 of its 12 rows)."""
    waves = _cdiv(s.OC * s.out_h, m.cores)
    pass_bytes = 2 * s.out_elems * 4
    return [
        waves * s.out_w,
        waves * s.out_w * eltwise_gathered_passes(s.out_w, m),  # rows vectorized across rows
        _streamed(pass_bytes, m),
        max(0, pass_bytes - m.cpu_l3_bytes) / m.cores,  # from DRAM, beyond the LLC
    ]
