"""The machine a predictor's terms count: cores, SIMD lanes and caches of the CPU, SMs and L2
of the GPU, and how a predictor file stores them (by name, format 4).

Facts detected where the samples were profiled (``profiler.machine_facts``) fill them in
(:func:`machine_from_facts`) when a predictor is trained or calibrated; the defaults are those
of the machine the shipped predictor was trained on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from codl_tvm.tiling import KernelVariants

# The CPU facts of the machine the shipped predictor was trained on, the defaults of
# :class:`Machine` (a predictor file that names none has these): Intel Sapphire Rapids (Intel
# 64 and IA-32 Architectures Optimization Reference Manual, Golden Cove: 48 KiB L1D and 2 MiB
# L2 per core, each core two hyperthreads: the guest's vCPUs are hyperthreads of half as many
# cores); its second-level TLB (2048 entries of 4 KiB pages: ``cpu_stream_terms.cpu_dense``);
# the last-level cache of the host's socket (a Xeon 8480-class part: 105 MB; the guest reports
# a synthetic 300 MiB): an elementwise pass of 2 x 82 MB runs ~2x slower per element than one
# of 2 x 49 MB, and any limit from 96 to 128 MB fits the samples alike.
CPU_L1_BYTES = 48 << 10
CPU_L2_BYTES_PER_CORE = 2 << 20
CPU_L3_BYTES = 105 << 20
CPU_STLB_ENTRIES = 2048
CPU_SMT = 2  # hardware threads per core


@dataclass(frozen=True)
class Machine:
    """What the blocking depends on: CPU cores, SIMD lanes and caches, GPU SMs and threads."""

    cores: int = 16
    lanes: int = 16
    sms: int = 132
    l2_bytes: int = 50 << 20
    max_threads: int = 1024  # GPU threads per block (cuda); not stored in predictor files
    # bytes of a parallel CPU pass beyond which it streams past the cores' caches; 0: the
    # Sapphire Rapids rule of blocking._streamed (the codl predictor learns it per target)
    cpu_stream_bytes: int = 0
    # SMs that run the kernels where fewer than ``sms`` (the SMs the compiler tiled for) are
    # the process's: a GPU shared by MPS, detected on the target; 0: all of ``sms``
    run_sms: int = 0
    # CPU caches, TLB reach and SMT (terms of ``cpu_terms``, ``cpu_stream_terms``); detected
    # where the samples were profiled (``profiler.machine_facts``) or the defaults above
    cpu_l1_bytes: int = CPU_L1_BYTES
    cpu_l2_bytes_per_core: int = CPU_L2_BYTES_PER_CORE
    cpu_l3_bytes: int = CPU_L3_BYTES
    cpu_stlb_entries: int = CPU_STLB_ENTRIES
    cpu_smt: int = CPU_SMT
    # the kernel variants the samples were profiled with (compile options; stored beside the
    # machine facts in a predictor file)
    variants: KernelVariants = KernelVariants()

    @property
    def active_sms(self) -> int:
        """SMs the waves of a kernel's blocks spread over."""
        return self.run_sms or self.sms

    @property
    def vector_regs(self) -> int:  # AVX-512 / NEON: 32; AVX2/SSE: 16 (target_info.py)
        return 32 if self.lanes >= 16 else 16


# the machine facts a codl predictor file keeps, by name (files before format 4: a list in this
# order, without run_sms; before 0.1 also without cpu_stream_bytes)
MACHINE_FIELDS = ("cores", "lanes", "sms", "l2_bytes", "cpu_stream_bytes", "run_sms")
# facts a file names only where they differ from the defaults (``CPU_L1_BYTES`` ...: the
# H100 machine's), so a file that names none predicts as before they were facts
CPU_FACT_FIELDS = ("cpu_l1_bytes", "cpu_l2_bytes_per_core", "cpu_l3_bytes", "cpu_stlb_entries",
                   "cpu_smt")  # fmt: skip
MACHINE_BY_NAME_FROM = 4  # the predictor file format that names its machine facts
# detected machine facts (``profiler.machine_facts``) -> the Machine field they fill
FACTS_TO_MACHINE = {
    "cpu_l1_bytes": "cpu_l1_bytes",
    "cpu_l2_bytes": "cpu_l2_bytes_per_core",  # sysfs: CPU 0's L2 (one core's)
    # not cpu_l3_bytes: a KVM guest's sysfs reports a synthetic L3 (300 MiB on the H100
    # machine, whose terms use its physical 105 MB), so the L3 stays the training machine's
    "cpu_stlb_entries": "cpu_stlb_entries",  # not detected: a facts file may state it
    "cpu_smt": "cpu_smt",  # not detected (a KVM guest shows no SMT): a facts file may state it
    "gpu_l2_bytes": "l2_bytes",
}


def machine_from_facts(m: Machine, facts: dict[str, Any]) -> Machine:
    """``m`` with the detected ``facts`` that are positive numbers (the rest kept)."""
    changes = {}
    for key, field in FACTS_TO_MACHINE.items():
        value = facts.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            changes[field] = int(value)
    return dataclasses.replace(m, **changes) if changes else m


def machine_json(m: Machine, version: int) -> dict[str, int] | list[int]:
    """By name from format 4; a file of format 2 saved again keeps its list (and gains
    ``run_sms`` at the end only where calibration set it), unless it has CPU facts other than
    the defaults: then it names them all."""
    default = Machine()
    facts = {f: getattr(m, f) for f in CPU_FACT_FIELDS if getattr(m, f) != getattr(default, f)}
    if version >= MACHINE_BY_NAME_FROM or facts:
        return {**{f: getattr(m, f) for f in MACHINE_FIELDS if getattr(m, f)}, **facts}
    values = [getattr(m, f) for f in MACHINE_FIELDS]
    return values if m.run_sms else values[:-1]


def load_machine(doc: dict[str, int] | list[int]) -> Machine:
    if isinstance(doc, list):
        doc = dict(zip(MACHINE_FIELDS, doc, strict=False))
    known = MACHINE_FIELDS + CPU_FACT_FIELDS
    unknown = set(doc) - set(known)
    if unknown:
        raise ValueError(f"unknown machine facts {sorted(unknown)}; known: {known}")
    return Machine(**{f: int(v) for f, v in doc.items()})


def variants_json(v: KernelVariants) -> dict[str, Any]:
    """The variants that differ from the defaults (a file without ``variants``: defaults)."""
    default = KernelVariants().to_json()
    return {k: x for k, x in v.to_json().items() if x != default[k]}
