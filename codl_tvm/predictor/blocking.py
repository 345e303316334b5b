"""Analytic blocking of the codl-tvm kernels: the non-linear part of CoDL Eq. 3.

For every (processor, op kind) the schedule rules of ``codl_tvm.schedules`` fix how the
output is cut into parallel tasks (CPU) or thread blocks (GPU) and how much work one task
does. The functions here recompute those counts from an :class:`OpSpec` alone (the planner
has no PrimFunc) and return the *terms* whose learned coefficients are the basic-unit times:

``T = t0 + sum_k t_k * term_k``

Every term is "waves of tasks x work per task" or a parallel memory pass, so the model stays
linear in the unit times and the staircases (waves, register tiles, padded tiles) are exact.
Mirrors: ``schedules/cpu_conv.py`` (``conv_tiles``: ``ocb`` channels x ``x_tile`` columns
per task), ``schedules/cpu_rules.py`` (depthwise/pool: one task per (channel, row); gemv:
column blocks of ``2*lanes`` grouped 16 per task plus a scalar tail) and
``schedules/gpu_rules.py`` (DLight Matmul: 64 OC x 32 output pixels per 128-thread block,
DLight Fallback: one output per thread, 1024 threads per block).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from codl_tvm.predictor.opspec import OpSpec


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Machine:
    """What the blocking depends on: CPU cores and SIMD lanes, GPU SMs."""

    cores: int = 16
    lanes: int = 16
    sms: int = 132
    l2_bytes: int = 50 << 20

    @property
    def vector_regs(self) -> int:  # AVX-512 / NEON: 32; AVX2/SSE: 16 (target_info.py)
        return 32 if self.lanes >= 16 else 16


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
    """pool: one task per (channel, row), scalar window loop per output."""
    waves = _cdiv(s.OC * s.out_h, m.cores)
    return [waves * s.out_w * s.reduction, waves * s.out_w, s.IC * s.H * s.W / m.cores]


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
    ]


def cpu_eltwise(s: OpSpec, m: Machine) -> list[float]:
    """parallel-loops over (channel, row), a row per task."""
    waves = _cdiv(s.OC * s.out_h, m.cores)
    return [waves * s.out_w, waves]


def gpu_gemm(s: OpSpec, m: Machine) -> list[float]:
    """DLight Matmul as implicit GEMM: 64 OC x 32 pixels per block, K loop per block."""
    blocks = _cdiv(s.OC, 64) * _cdiv(s.out_h * s.out_w, 32)
    k = _cdiv(s.reduction, 16) * 16
    return [_cdiv(blocks, m.sms) * k, blocks * k, blocks]


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


# (processor, op kind) -> terms; the fixed launch/dispatch cost t0 is added by the model
TERMS: dict[tuple[str, str], Callable[[OpSpec, Machine], list[float]]] = {
    ("cpu", "conv2d"): cpu_conv,
    ("cpu", "depthwise"): cpu_depthwise,
    ("cpu", "pool_max"): cpu_pool,
    ("cpu", "pool_avg"): cpu_pool,
    ("cpu", "dense"): cpu_dense,
    ("cpu", "elementwise"): cpu_eltwise,
    ("gpu", "conv2d"): gpu_gemm,
    ("gpu", "depthwise"): gpu_thread,
    ("gpu", "pool_max"): gpu_thread,
    ("gpu", "pool_avg"): gpu_thread,
    ("gpu", "elementwise"): gpu_thread,
    ("gpu", "dense"): gpu_dense,
}


# algorithms (as the samples' ``algorithm`` column names them) whose blocking is modelled above
ANALYTIC: dict[str, frozenset[str]] = {
    "cpu": frozenset({"direct-nchwc", "depthwise-direct", "pool", "gemv", "parallel-loops"}),
    "gpu": frozenset(
        {"implicit-gemm", "depthwise-direct", "pool", "elementwise", "dlight-fallback"}
    ),
}


def variant(s: OpSpec) -> str:
    """Model key beyond (processor, kind): CoDL keeps one model per filter-size algorithm."""
    if kernel_kind(s) == "conv2d":
        return "k1" if s.KH * s.KW == 1 else "kn"
    return ""


def kernel_kind(s: OpSpec) -> str:
    """Kind whose kernel actually runs: a one-group depthwise part is a plain conv."""
    return "conv2d" if s.kind == "depthwise" and s.groups == 1 else s.kind


def terms(family: str, s: OpSpec, m: Machine) -> list[float]:
    """``[1, term_1, ...]`` of ``s`` run by a codl-tvm kernel on a ``family`` processor."""
    fn = TERMS.get((family, kernel_kind(s)))
    if fn is None:
        raise ValueError(f"no blocking rule for {s.kind} on a {family}")
    return [1.0, *fn(s, m)]


def recorded_terms(s: OpSpec, block: int, unit: int, cores: int) -> list[float]:
    """Eq. 3 from a blocking recorded in the samples (kernels this module does not model):
    ``waves * units`` steps whose time is linear in the sub-op's (H, W, IC, OC)."""
    size = block or _cdiv(s.out_elems, cores)
    n = _cdiv(_cdiv(s.out_elems, size), cores) * _cdiv(size, unit)
    return [1.0, n, n * s.out_h, n * s.out_w, n * s.reduction, n * s.OC]
