"""Analytic blocking of the codl-tvm kernels: the non-linear part of CoDL Eq. 3.

For every (processor, op kind) the schedule rules of ``codl_tvm.schedules`` fix how the
output is cut into parallel tasks (CPU) or thread blocks (GPU) and how much work one task
does. The functions here recompute those counts from an :class:`OpSpec` alone (the planner
has no PrimFunc) and return the *terms* whose learned coefficients are the basic-unit times:

``T = t0 + sum_k t_k * term_k``

Every term is "waves of tasks x work per task" or a parallel memory pass, so the model stays
linear in the unit times and the staircases (waves, register tiles, padded tiles) are exact.
Which kernel runs (and its block counts) comes from :mod:`codl_tvm.predictor.mirror`, the
mirror of the dispatch table; the terms are per algorithm (:data:`TERMS`), the CPU ones in
:mod:`codl_tvm.predictor.cpu_terms`, the GPU ones in :mod:`codl_tvm.predictor.gpu_terms`.
Mirrors:
``schedules/cpu_gemm.py`` (1x1 GEMM: ``mr`` channels x ``nv`` pixel vectors per register tile,
(pixel tile, OC block) tasks, input/weight packing per call), ``schedules/cpu_winograd.py``
(F(2x2,3x3): 16 batched GEMMs of ``pt`` tiles x ``ocb`` channels, input/weight/output
transforms), ``schedules/gpu_conv.py`` (tiled implicit GEMM: the shape-class tile, split-K
blocks on ``blockIdx.z`` and the second sum pass), ``schedules/gpu_winograd.py``
(F(2x2,3x3) on the GPU: 16 batched GEMMs on ``blockIdx.z`` with the tiled conv's default
tile table, three transform kernels), ``schedules/cpu_conv.py``
(``conv_tiles``: ``ocb`` channels x ``x_tile`` columns per task),
``schedules/cpu_group_conv.py`` (one task per block of rows of a channel),
``schedules/cpu_rules.py`` (pool: one task per (channel, row); gemv: column blocks
of ``2*lanes`` grouped 16 per task plus a scalar tail) and ``schedules/gpu_rules.py``
(DLight Fallback: one output per thread, 1024 threads per block; DLight Matmul, only with the
kernel variant ``gpu_conv="dlight"``: 64 OC x 32 output pixels per 128-thread block).
"""

from __future__ import annotations

from collections.abc import Callable

from codl_tvm.predictor.cpu_stream_terms import (  # noqa: F401 - constants: this module's API
    CPU_ELTWISE_TERMS,
    CPU_PAGE_BYTES,
    _streamed,
    cpu_dense,
    cpu_eltwise,
    cpu_pool,
)
from codl_tvm.predictor.cpu_terms import (
    CPU_CONV_TERMS,
    CPU_GEMM_TERMS,
    CPU_WINOGRAD_TERMS,
    conv_spills,  # noqa: F401 - this module's API
    cpu_conv,
    cpu_depthwise,
    cpu_gemm,
    cpu_winograd,
)
from codl_tvm.predictor.gpu_terms import (  # noqa: F401 - resident_blocks: this module's API
    GPU_ELEMENTWISE_TERMS,
    GPU_POOL_TERMS,
    GPU_TILED_TERMS,
    GPU_WINOGRAD_TERMS,
    _cdiv,
    gpu_dense,
    gpu_elementwise,
    gpu_gemm,
    gpu_gemv,
    gpu_pool,
    gpu_thread,
    gpu_tiled,
    gpu_winograd,
    resident_blocks,
)
from codl_tvm.predictor.mirror import GPU_GEMV, GPU_WINOGRAD, Machine, kernel
from codl_tvm.predictor.opspec import OpSpec

__all__ = ["ANALYTIC", "TERMS", "TERM_NAMES", "Machine", "kernel_kind", "model_algorithm",
           "term_column", "terms"]


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
    ("gpu", "pool"): gpu_pool,
    ("gpu", "elementwise"): gpu_elementwise,
    ("gpu", "dlight-fallback"): gpu_dense,  # samples taken before the GEMV rule
    ("gpu", GPU_GEMV): gpu_gemv,
}
# (family, model algorithm) -> the names of ``terms``' columns, t0 first, where a tie names one
# (``ties.py``); the names sit beside each term function's list
TERM_NAMES: dict[tuple[str, str], tuple[str, ...]] = {
    ("cpu", "direct-nchwc"): ("t0", *CPU_CONV_TERMS),
    ("cpu", "gemm-1x1"): ("t0", *CPU_GEMM_TERMS),
    ("cpu", "winograd-2x2-3x3"): ("t0", *CPU_WINOGRAD_TERMS),
    ("cpu", "parallel-loops"): ("t0", *CPU_ELTWISE_TERMS),
    ("gpu", "gpu-conv-tiled"): ("t0", *GPU_TILED_TERMS),
    ("gpu", GPU_WINOGRAD): ("t0", *GPU_WINOGRAD_TERMS),
    ("gpu", "pool"): ("t0", *GPU_POOL_TERMS),
    ("gpu", "elementwise"): ("t0", *GPU_ELEMENTWISE_TERMS),
}


def term_column(family: str, algorithm: str, name: str) -> int:
    """The column of term ``name`` in the ``terms`` of ``algorithm`` on ``family``."""
    names = TERM_NAMES.get((family, algorithm))
    if names is None or name not in names:
        raise KeyError(f"no term {name!r} of {family}/{algorithm}; named: {names}")
    return names.index(name)


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
    """``k1`` / ``k1s2`` / ``kn``: CoDL keeps one model per filter-size algorithm, and a 1x1
    window at stride 2 gets its own. It reads a quarter of the input its pad pass copies, so
    its pass and fetch units differ from stride 1's, where the two terms scale alike and the
    fit cannot tell them apart. Trained with the stride-1 rows in one model, 1x1 stride-2
    rows cost the CPU split 2.6 points and the GPU's held-out POSENET 8."""
    if s.KH * s.KW != 1:
        return "kn"
    return "k1s2" if max(s.SH, s.SW) > 1 else "k1"


# the variant whose model predicts a variant that has none (a file trained without samples
# of it): a 1x1 stride-2 conv falls back to the 1x1 model, as before it had its own
VARIANT_FALLBACK: dict[str, str] = {"k1s2": "k1"}


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
