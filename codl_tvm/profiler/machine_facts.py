"""Facts of the machine a profile runs on, detected there and stored beside its samples.

Standard library + the TVM runtime only (``bundle_runner.py`` imports this file as a sibling
module where only runtime-only TVM exists). The runner writes ``SAMPLES.machine.json`` beside
the samples CSV; ``codl-tvm calibrate`` hands it to the predictor, whose terms take what they
count (the GPU's SMs; a process under CUDA MPS sees only the SMs MPS gives it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def facts_path(samples: str | Path) -> Path:
    """Where the facts of a samples file go: ``x.csv`` -> ``x.machine.json``."""
    p = Path(samples)
    return p.with_name(p.name.removesuffix(".csv") + ".machine.json")


def detect(gpu: Any | None = None, host: bool = True) -> dict[str, Any]:
    """The host CPU's model, logical CPUs and caches (unless ``host`` is false: an RPC target's
    CPU is not this one), and ``gpu``'s name, SMs, L2, threads per block and, for CUDA, per-SM
    limits (a TVM runtime device, remote ones too; ``None`` or a CPU device: no GPU facts)."""
    facts: dict[str, Any] = {}
    if host:
        facts.update(cpu_model=_cpu_model(), cpu_logical=os.cpu_count() or 0, **_cpu_caches())
    if gpu is not None and int(gpu.dlpack_device_type()) % 128 != 1 and gpu.exist:
        facts.update(gpu_name=gpu.device_name, gpu_sms=int(gpu.multi_processor_count),
                     gpu_l2_bytes=int(gpu.l2_cache_size_bytes or 0),
                     gpu_block_threads=int(gpu.max_threads_per_block or 0))  # fmt: skip
        if int(gpu.dlpack_device_type()) == CUDA_DEVICE_TYPE:
            facts.update(cuda_sm_limits(str(gpu.compute_version)))
    return facts


CUDA_DEVICE_TYPE = 2  # kDLCUDA
# Per-SM limits by compute capability (CUDA C++ Programming Guide, "Technical Specifications
# per Compute Capability"): resident threads, resident blocks, 32-bit registers, and warp
# schedulers (the guide's "Arithmetic Instructions" SM descriptions). TVM's device API
# reports the compute capability, not these.
CUDA_SM_LIMITS = {
    "5.0": (2048, 32, 65536, 4), "5.2": (2048, 32, 65536, 4), "5.3": (2048, 32, 65536, 4),
    "6.0": (2048, 32, 65536, 2), "6.1": (2048, 32, 65536, 4), "6.2": (2048, 32, 65536, 4),
    "7.0": (2048, 32, 65536, 4), "7.2": (2048, 32, 65536, 4), "7.5": (1024, 16, 65536, 4),
    "8.0": (2048, 32, 65536, 4), "8.6": (1536, 16, 65536, 4), "8.7": (2048, 16, 65536, 4),
    "8.9": (1536, 24, 65536, 4), "9.0": (2048, 32, 65536, 4),
}  # fmt: skip


def cuda_sm_limits(compute_version: str) -> dict[str, int]:
    """The SM limits of a CUDA GPU of ``compute_version`` ("9.0"); none for one not listed."""
    limits = CUDA_SM_LIMITS.get(compute_version)
    if limits is None:
        return {}
    names = ("gpu_sm_threads", "gpu_sm_blocks", "gpu_sm_registers", "gpu_warp_schedulers")
    return dict(zip(names, limits, strict=True))


def write(samples: str | Path, facts: dict[str, Any]) -> Path:
    path = facts_path(samples)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(facts, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def beside(samples: str | Path) -> dict[str, Any] | None:
    """The facts the profiler wrote beside ``samples`` (:func:`facts_path`); None without."""
    path = facts_path(samples)
    return read(path) if path.is_file() else None


def read(path: str | Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a machine facts file ({err})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a machine facts file (not an object)")
    return doc


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _cpu_caches() -> dict[str, int]:
    """L1d, L2 and L3 bytes of CPU 0 from sysfs (Linux; nothing elsewhere)."""
    out: dict[str, int] = {}
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        unit = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
        out[f"cpu_l{level}_bytes"] = int(size.rstrip("KM")) * unit
    return out
