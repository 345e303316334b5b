"""CPU + GPU device pairs: the two targets, the two Relax VDevices and the runtime devices.

A pair always has two *roles*: ``cpu`` (an ``llvm`` target) and ``gpu`` (``cuda``, ``opencl``,
Adreno texture, or a second ``llvm`` device in the ``cpu-pair`` used for testing). The GPU role
is VDevice 0 of every module we build: the Relax VM places all constants on ``devices[0]``
(apache/tvm#17884), so the GPU (the device that holds the model's tensors between chains, as in
CoDL) is the one that gets them for free; weights the CPU needs are lifted into parameters.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm
import tvm_ffi
from tvm import relax

from .geometry import OVERLAP_CPU_CHUNKS

ROLES: tuple[str, str] = ("gpu", "cpu")

# runtime device kind of each target kind (the index comes from the pair)
_RUNTIME_KIND: dict[str, str] = {"llvm": "cpu", "cuda": "cuda", "opencl": "opencl"}


_SYSFS_CPU = Path("/sys/devices/system/cpu")


def physical_cores(sysfs: Path = _SYSFS_CPU) -> int:
    """Cores this process may use, counting a core's hyper-threads once.

    The default ``num-cores`` of the host's llvm target, which also sizes TVM's CPU pool
    (:mod:`codl_tvm.profiler.cpu_pool`): TVM alone would halve the logical CPUs on x86 even
    where, as on the H100 machine's VM, each core has one thread. Falls back to the logical
    count where sysfs has no topology (not Linux).
    """
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    siblings = set()
    for cpu in allowed:
        topo = sysfs / f"cpu{cpu}" / "topology" / "thread_siblings_list"
        try:
            siblings.add(topo.read_text().strip())
        except OSError:
            return len(allowed) or os.cpu_count() or 1
    return len(siblings) or os.cpu_count() or 1


def _host_cpu_target(num_cores: int | None = None) -> dict[str, Any]:
    mcpu = tvm.target.codegen.llvm_get_system_cpu()
    spec: dict[str, Any] = {"kind": "llvm", "mcpu": mcpu}
    spec["num-cores"] = int(num_cores or physical_cores())
    return spec


def _detect_cuda_arch() -> str | None:
    dev = tvm.cuda(0)
    if not dev.exist:
        return None
    return "sm_" + dev.compute_version.replace(".", "")


def _gpu_sms(value: Any) -> int | None:
    """A pair document's ``gpu_sms``: None, or a positive integer."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"gpu_sms must be a positive integer (the GPU's SMs), not {value!r}")
    return value


def _shared_memory(value: Any) -> bool | None:
    """A pair document's ``shared_memory``: None, true or false."""
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"shared_memory must be true or false, not {value!r}")


def _detect_cuda_sms() -> int | None:
    """SMs of this machine's CUDA GPU (the process's share under MPS); None without one."""
    dev = tvm.cuda(0)
    return int(dev.multi_processor_count) if dev.exist else None


_AARCH64_ANDROID: dict[str, Any] = {
    "kind": "llvm",
    "mtriple": "aarch64-linux-android",
    "mattr": ["+neon"],
}


@dataclass(frozen=True)
class DevicePair:
    """A CPU target and a GPU target that co-execute one model.

    Parameters
    ----------
    name : str
        Preset name or a user label.
    cpu_spec, gpu_spec : dict
        JSON target dicts (TVM's convention) for the CPU role and the GPU role.
    cpu_index, gpu_index : int
        Runtime device indices (``tvm.cpu(cpu_index)``, ``tvm.cuda(gpu_index)``...).
    gpu_sms : int, optional
        The GPU's streaming multiprocessors (compute units), which GPU kernels are tiled for;
        detected by the ``x86-cuda`` preset where the GPU is (under CUDA MPS: the SMs the
        process may use). None: the datasheet count of the target's arch
        (:data:`codl_tvm.tiling.SMS`).
    shared_memory : bool, optional
        Whether the two roles draw on one memory (a phone's or a Jetson's DRAM, PoCL, the
        ``cpu-pair``). None: as the GPU's kind says (:attr:`shares_memory`). A plan's memory
        cap counts what the roles share (:func:`codl_tvm.planner.strategies.cap_memory`).
    """

    name: str
    cpu_spec: dict[str, Any]
    gpu_spec: dict[str, Any]
    cpu_index: int = 0
    gpu_index: int = 0
    gpu_sms: int | None = None
    shared_memory: bool | None = None
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # ---- construction -------------------------------------------------------------------
    @staticmethod
    def preset(name: str, *, arch: str | None = None, num_cores: int | None = None) -> DevicePair:
        """Build a named pair.

        Parameters
        ----------
        name : {"cpu-pair", "x86-cuda", "x86-opencl", "android-opencl", "android-adreno", "auto"}
            ``cpu-pair`` is llvm:0 + llvm:1 and runs anywhere; ``auto`` is ``x86-cuda`` when a
            CUDA GPU is present, else ``cpu-pair`` (with a warning saying so).
        arch : str, optional
            CUDA architecture such as ``"sm_90"``; detected from the GPU when not given.
        num_cores : int, optional
            CPU cores the llvm target may use; defaults to this machine's count.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown device pair {name!r}; known pairs: {sorted(PRESETS)}")
        return PRESETS[name](arch=arch, num_cores=num_cores)

    @staticmethod
    def parse(text: str, *, arch: str | None = None, num_cores: int | None = None) -> DevicePair:
        """A pair from the command line: a preset name, or JSON target dicts (TVM's convention)
        such as ``{"cpu": {"kind": "llvm", "mcpu": "sapphirerapids"}, "gpu": {"kind": "cuda",
        "arch": "sm_90"}}`` (optional ``name``, ``cpu_index``, ``gpu_index``, ``gpu_sms``,
        ``shared_memory``)."""
        if not text.lstrip().startswith("{"):
            return DevicePair.preset(text, arch=arch, num_cores=num_cores)
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"--pair is neither a preset name nor valid JSON: {err}") from None
        if not isinstance(doc, dict) or not {"cpu", "gpu"} <= set(doc):
            raise ValueError('a JSON pair needs "cpu" and "gpu" target dicts')
        for role in ("cpu", "gpu"):
            try:
                tvm.target.Target(doc[role])
            except Exception as err:  # TVM raises several types for a bad target dict
                raise ValueError(f"--pair: bad {role} target {doc[role]!r}: {err}") from None
        doc.setdefault("name", "custom")
        for role in ("cpu", "gpu"):  # a host target without a CPU: generic x86-64 code is slow
            spec = doc[role]
            if spec.get("kind") == "llvm" and not ({"mcpu", "mtriple"} & set(spec)):
                doc[role] = {**spec, "mcpu": tvm.target.codegen.llvm_get_system_cpu()}
        if doc["gpu"].get("kind") == "llvm" and "gpu_index" not in doc:
            doc["gpu_index"] = 1  # two llvm devices, as the cpu-pair
        return DevicePair.from_json(doc)

    @staticmethod
    def from_json(doc: dict[str, Any]) -> DevicePair:
        """Rebuild a pair from :meth:`to_json` output."""
        try:
            return DevicePair(
                name=str(doc["name"]),
                cpu_spec=dict(doc["cpu"]),
                gpu_spec=dict(doc["gpu"]),
                cpu_index=int(doc.get("cpu_index", 0)),
                gpu_index=int(doc.get("gpu_index", 0)),
                gpu_sms=_gpu_sms(doc.get("gpu_sms")),
                shared_memory=_shared_memory(doc.get("shared_memory")),
            )
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed device pair document: missing {err}") from None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cpu": self.cpu_spec,
            "gpu": self.gpu_spec,
            "cpu_index": self.cpu_index,
            "gpu_index": self.gpu_index,
        } | ({"gpu_sms": self.gpu_sms} if self.gpu_sms is not None else {}) | (
            {"shared_memory": self.shared_memory} if self.shared_memory is not None else {})

    # ---- targets and vdevices -----------------------------------------------------------
    @property
    def cpu_target(self) -> tvm.target.Target:
        if "cpu_target" not in self._cache:
            self._cache["cpu_target"] = tvm.target.Target(self.cpu_spec)
        return self._cache["cpu_target"]

    @property
    def gpu_target(self) -> tvm.target.Target:
        if "gpu_target" not in self._cache:
            spec = self.gpu_spec
            host = self.cpu_target if spec["kind"] != "llvm" else None
            self._cache["gpu_target"] = tvm.target.Target(spec, host=host)
        return self._cache["gpu_target"]

    def target(self, role: str) -> tvm.target.Target:
        return self.gpu_target if role == "gpu" else self.cpu_target

    @property
    def vdevices(self) -> list[relax.VDevice]:
        """The module's VDevice list, GPU role first (index 0), CPU role second."""
        if "vdevices" not in self._cache:
            self._cache["vdevices"] = [
                relax.VDevice(self.gpu_target, self.gpu_index, "global"),
                relax.VDevice(self.cpu_target, self.cpu_index, "global"),
            ]
        return self._cache["vdevices"]

    def vdevice(self, role: str) -> relax.VDevice:
        return self.vdevices[ROLES.index(role)]

    @property
    def is_cpu_only(self) -> bool:
        """True when both roles are llvm devices (the ``cpu-pair``)."""
        return self.gpu_spec["kind"] == "llvm"

    @property
    def shares_memory(self) -> bool:
        """Whether the roles draw on one memory: :attr:`shared_memory` where the pair says,
        else every GPU but a CUDA one (a discrete card with memory of its own; a Jetson, whose
        CUDA GPU shares the DRAM, says ``"shared_memory": true`` in its pair document)."""
        if self.shared_memory is not None:
            return self.shared_memory
        return self.gpu_spec["kind"] != "cuda"

    @property
    def overlaps_copies(self) -> bool:
        """True where a split's copies run beside its kernels by default: a CUDA GPU, whose
        streams and events TVM's device API offers (:class:`~codl_tvm.passes.OverlapCopies`)."""
        return self.gpu_spec["kind"] == "cuda"

    @property
    def cpu_chunks(self) -> int:
        """Most chunks the CPU's part of a row split runs in by default, each chunk's rows
        copied to the GPU while the next one computes: 2 where copies overlap kernels (a
        CUDA GPU; :class:`~codl_tvm.passes.OverlapCopies`), else 1 (no copy to hide:
        the CPU pair has none, and on OpenCL a copy is the host's own work)."""
        return OVERLAP_CPU_CHUNKS if self.overlaps_copies else 1

    @property
    def runs_block_copies(self) -> bool:
        """True where a split's row slices and concat are 2-D copies, and the GPU's kernels
        read and write their rows of the whole tensors, by default: a CUDA GPU
        (``cudaMemcpy2DAsync``; :class:`~codl_tvm.passes.LowerSlicesToBlockCopies`)."""
        return self.gpu_spec["kind"] == "cuda"

    def runtime_kind(self, role: str) -> str:
        spec = self.gpu_spec if role == "gpu" else self.cpu_spec
        return _RUNTIME_KIND[spec["kind"]]

    def runtime_index(self, role: str) -> int:
        return self.gpu_index if role == "gpu" else self.cpu_index

    def __str__(self) -> str:
        return f"{self.name} (cpu={self.cpu_spec['kind']}:{self.cpu_index}, " + (
            f"gpu={self.gpu_spec['kind']}:{self.gpu_index})"
        )


def _cpu_pair(arch: str | None = None, num_cores: int | None = None) -> DevicePair:
    # the host's own CPU and features: without mcpu LLVM emits generic x86-64 code (2.9x
    # slower on ResNet-18 on a Zen 5 host)
    spec = _host_cpu_target(num_cores)
    return DevicePair("cpu-pair", dict(spec), dict(spec), cpu_index=0, gpu_index=1)


def _x86_cuda(arch: str | None = None, num_cores: int | None = None) -> DevicePair:
    arch = arch or _detect_cuda_arch()
    if arch is None:
        raise ValueError(
            "x86-cuda: no CUDA GPU here to detect the architecture from; pass arch (e.g. 'sm_90')"
        )
    return DevicePair("x86-cuda", _host_cpu_target(num_cores), {"kind": "cuda", "arch": arch},
                      gpu_sms=_detect_cuda_sms())


def _android_opencl(arch: str | None = None, num_cores: int | None = None) -> DevicePair:
    cpu = dict(_AARCH64_ANDROID, **({"num-cores": num_cores} if num_cores else {}))
    return DevicePair("android-opencl", cpu, {"kind": "opencl"})


def _android_adreno(arch: str | None = None, num_cores: int | None = None) -> DevicePair:
    cpu = dict(_AARCH64_ANDROID, **({"num-cores": num_cores} if num_cores else {}))
    # TVM's qcom/adreno-opencl-texture tag: the "texture" key turns on the texture path
    gpu = {"kind": "opencl", "device": "adreno", "keys": ["adreno", "opencl", "gpu", "texture"]}
    return DevicePair("android-adreno", cpu, gpu)


def _x86_opencl(arch: str | None = None, num_cores: int | None = None) -> DevicePair:
    # any OpenCL device beside this host's CPU: a discrete GPU, or PoCL (CPU memory, as a
    # phone's GPU shares it)
    return DevicePair("x86-opencl", _host_cpu_target(num_cores), {"kind": "opencl"})


def _auto(arch: str | None = None, num_cores: int | None = None) -> DevicePair:
    if arch or tvm.cuda(0).exist:
        return _x86_cuda(arch=arch, num_cores=num_cores)
    warnings.warn("auto: no CUDA GPU found, using the cpu-pair (llvm:0 + llvm:1)", stacklevel=3)
    return _cpu_pair(num_cores=num_cores)


PRESETS = {
    "cpu-pair": _cpu_pair,
    "x86-cuda": _x86_cuda,
    "android-opencl": _android_opencl,
    "android-adreno": _android_adreno,
    "x86-opencl": _x86_opencl,
    "auto": _auto,
}


def vdevice_index(vdevices: list[relax.VDevice], vdev: relax.VDevice | None) -> int | None:
    """Position of ``vdev`` in a module's vdevice list (None when absent or unannotated).

    Compared structurally: ``VDevice.same_as`` recurses forever in TVM 0.27.
    """
    if vdev is None:
        return None
    for i, cand in enumerate(vdevices):
        if tvm_ffi.structural_equal(cand, vdev):
            return i
    return None
