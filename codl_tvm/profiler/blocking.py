"""Blocking of a built kernel (CoDL Eq. 3): outputs per block, per basic unit, and cores.

Until the schedules package provides ``blocking_of(primfunc)``, the blocking is read off the
kernel's own loops: GPU kernels from their ``blockIdx``/``threadIdx`` bindings (a basic unit is
one warp of threads), CPU kernels from ``T.parallel`` (an even split over the target's cores)
and ``T.vectorized`` loops (the SIMD basic unit). :func:`kernel_blocking` is the one place to
switch over to the schedules package.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

WARP_SIZE = 32
# streaming multiprocessors per CUDA arch when the device cannot be asked (compile time)
SM_COUNT: dict[str, int] = {"sm_90": 132, "sm_89": 128, "sm_86": 84, "sm_80": 108, "sm_75": 72}
_BIND = re.compile(r'thread_binding\((?:T\.int64\()?(\d+)\)?, thread="(\w+)\.(\w)"\)')
_PARALLEL = re.compile(r"T\.parallel\((?:T\.int64\()?(\d+)")
_VECTOR = re.compile(r"T\.vectorized\((?:T\.int64\()?(\d+)")


@dataclass(frozen=True)
class Blocking:
    """How a kernel's output is cut: ``block`` outputs per block (0: one even share per core),
    ``unit`` outputs per basic unit, ``cores`` blocks running at once."""

    algorithm: str
    block: int
    unit: int
    cores: int

    def counts(self, out_elems: int) -> tuple[int, int]:
        """(waves of blocks over the cores, basic units per block) for ``out_elems`` outputs."""
        block = self.block or math.ceil(out_elems / self.cores)
        blocks = math.ceil(out_elems / block)
        return math.ceil(blocks / self.cores), math.ceil(block / self.unit)


def _schedules_blocking(func: Any, target: dict[str, Any]) -> Blocking | None:
    try:
        from codl_tvm.schedules import blocking_of
    except ImportError:
        return None
    got = blocking_of(func)
    if got is None:
        return None
    cores = got.cores or SM_COUNT.get(str(target.get("arch", "")), 1)
    return Blocking(str(got.algorithm), int(got.block_size), int(got.basic_unit_size), int(cores))


def loop_blocking(script: str, out_elems: int, target: dict[str, Any], rule: str) -> Blocking:
    """Blocking read from a scheduled PrimFunc's TVMScript text."""
    grid, threads = 1, 1
    for extent, scope, _axis in _BIND.findall(script):
        if scope == "blockIdx":
            grid *= int(extent)
        elif scope == "threadIdx":
            threads *= int(extent)
    if target.get("kind") in ("cuda", "opencl") or grid > 1 or threads > 1:
        block = max(1, math.ceil(out_elems / grid))
        per_thread = max(1, math.ceil(block / threads))
        cores = SM_COUNT.get(str(target.get("arch", "")), 1) if target.get("kind") == "cuda" else 1
        return Blocking(f"dlight-{rule}", block, per_thread * min(WARP_SIZE, threads), cores)
    vec = [int(v) for v in _VECTOR.findall(script)]
    par = _PARALLEL.findall(script)
    cores = int(target.get("num-cores", 1)) if par else 1
    algo = "llvm-" + ("parallel" if par else "naive") + ("-simd" if vec else "")
    return Blocking(algo, 0, max(vec) if vec else 1, cores)


def kernel_blocking(func: Any, out_elems: int, target: dict[str, Any], rule: str) -> Blocking:
    """Blocking of one scheduled PrimFunc (the schedules package's answer when it has one)."""
    return _schedules_blocking(func, target) or loop_blocking(
        func.script(), out_elems, target, rule
    )
