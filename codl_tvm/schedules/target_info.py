"""What a schedule needs to know about a target: family, SIMD lanes, registers, cores."""

from __future__ import annotations

import dataclasses
import os

import tvm

# mcpu names whose LLVM models have AVX-512F; checked before the AVX2 list.
_AVX512_CPUS = (
    "skylake-avx512", "cascadelake", "cooperlake", "icelake-client", "icelake-server",
    "tigerlake", "sapphirerapids", "emeraldrapids", "graniterapids", "rocketlake",
    "znver4", "znver5", "x86-64-v4", "knl", "knm",
)
_AVX2_CPUS = (
    "haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "arrowlake",
    "lunarlake", "znver1", "znver2", "znver3", "x86-64-v3", "bdver4", "gracemont",
)


@dataclasses.dataclass(frozen=True)
class TargetInfo:
    """Facts about a target that drive tiling.

    Attributes
    ----------
    family : str
        ``"cpu"`` or ``"gpu"``.
    kind : str
        Target kind name (``llvm``, ``cuda``, ``opencl``, ...).
    lanes : int
        FP32 SIMD lanes (CPU) or warp/sub-group size (GPU).
    vector_regs : int
        Architectural vector registers (CPU register tiling budget).
    cores : int | None
        ``num-cores`` of the CPU target; ``None`` on the GPU.
    max_threads : int
        Threads per work-group (GPU); 1 on the CPU.
    """

    family: str
    kind: str
    lanes: int
    vector_regs: int
    cores: int | None
    max_threads: int


def _attr(target: tvm.target.Target, key: str) -> str:
    attrs = target.attrs
    return str(attrs[key]) if key in attrs and attrs[key] is not None else ""


def _cpu_simd(target: tvm.target.Target) -> tuple[int, int]:
    """(fp32 lanes, vector registers) from mtriple/mcpu/mattr; SSE2 when nothing is said."""
    triple = _attr(target, "mtriple")
    mcpu = _attr(target, "mcpu").lower()
    mattr = _attr(target, "mattr").lower()
    if triple.startswith(("aarch64", "arm64")):
        return 4, 32  # NEON: 128-bit, 32 registers
    if triple.startswith("arm"):
        return 4, 16
    if "+avx512f" in mattr or mcpu in _AVX512_CPUS:
        return 16, 32
    if "+avx2" in mattr or "+avx" in mattr or mcpu in _AVX2_CPUS:
        return 8, 16
    return 4, 16


def target_info(target: tvm.target.Target) -> TargetInfo:
    """Describe ``target`` for the schedules."""
    kind = target.kind.name
    if kind == "llvm":
        lanes, regs = _cpu_simd(target)
        cores_attr = _attr(target, "num-cores")
        cores = int(cores_attr) if cores_attr else (os.cpu_count() or 1)
        return TargetInfo("cpu", kind, lanes, regs, cores, 1)
    warp = _attr(target, "thread_warp_size")
    threads = _attr(target, "max_num_threads")
    return TargetInfo(
        "gpu", kind, int(warp) if warp else 32, 0, None, int(threads) if threads else 256
    )
