"""The machine a predictor's terms count, and how a predictor file stores it.

Every fact is data: detected where the samples were profiled (``profiler.machine_facts``:
caches, SMs and the GPU's per-SM limits; ``profiler.codegen_facts``: what LLVM makes of the
CPU kernels for the pair's CPU target), stored by name in the predictor file, and taken from
there. No module holds one machine's numbers. The one machine the project's own files were
trained on, the *reference machine*, is the machine of the shipped predictor
(``data/predictor-x86-cuda.json``); it fills the facts that a file from before they were
stored (format < :data:`ALL_FACTS_FROM`) or a profile that could not detect them lacks.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from codl_tvm.tiling import KernelVariants
from codl_tvm.tiling.variants import BEFORE

REFERENCE_FILE = Path(__file__).resolve().parent.parent / "data" / "predictor-x86-cuda.json"
BY_NAME_FROM = 4  # the predictor file format that names its machine's facts
ALL_FACTS_FROM = 5  # the predictor file format that names every fact of its machine


class MachineFactWarning(UserWarning):
    """A predictor was trained without a fact of its machine and took the reference's."""


@dataclass(frozen=True)
class Machine:
    """What the kernels' blocking and the terms depend on.

    Fields are grouped as :data:`FACT_GROUPS` says; :func:`reference` is the machine the
    shipped predictor was trained on.
    """

    # the CPU: the pool's workers, SIMD lanes of a float vector, caches, TLB reach, SMT
    cores: int
    lanes: int
    cpu_l1_bytes: int
    cpu_l2_bytes_per_core: int
    cpu_l3_bytes: int
    cpu_stlb_entries: int
    cpu_smt: int
    # the GPU: the SMs the compiler tiled for, its L2, threads per block, per-SM limits
    sms: int
    l2_bytes: int
    max_threads: int
    gpu_sm_threads: int
    gpu_sm_blocks: int
    gpu_sm_registers: int
    gpu_warp_schedulers: int
    # what LLVM makes of the CPU kernels for the pair's CPU target (``codegen_facts``)
    llvm_vector_floats: int
    llvm_min_trip: int
    eltwise_unroll_add: int
    eltwise_unroll_relu: int
    pad_gather_identity_w: tuple[int, int]
    pad_gather_crop_w: tuple[int, int]
    sampled_gather_w: int
    sampled_gather_inexact_w: int
    sampled_gather_one_row_w: tuple[int, int]
    sampled_gather_tail_w: int
    # learned, not detected: bytes of a parallel CPU pass beyond which it streams past the
    # caches (0: the rule of ``cpu_stream_terms._streamed``)
    cpu_stream_bytes: int = 0
    # SMs that run the kernels where fewer than ``sms`` are the process's (CUDA MPS); 0: all
    run_sms: int = 0
    # the kernel variants the samples were profiled with (compile options; stored beside)
    variants: KernelVariants = KernelVariants()

    @property
    def active_sms(self) -> int:
        """SMs the waves of a kernel's blocks spread over."""
        return self.run_sms or self.sms

    @property
    def vector_regs(self) -> int:  # AVX-512 / NEON: 32; AVX2/SSE: 16 (target_info.py)
        return 32 if self.lanes >= 16 else 16


# which facts a predictor needs for which of its processor families, and where they come from
FACT_GROUPS: dict[str, tuple[str, ...]] = {
    "cpu": ("cores", "lanes", "cpu_l1_bytes", "cpu_l2_bytes_per_core", "cpu_l3_bytes",
            "cpu_stlb_entries", "cpu_smt"),
    "gpu": ("sms", "l2_bytes", "max_threads", "gpu_sm_threads", "gpu_sm_blocks",
            "gpu_sm_registers", "gpu_warp_schedulers"),
    "codegen": ("llvm_vector_floats", "llvm_min_trip", "eltwise_unroll_add",
                "eltwise_unroll_relu", "pad_gather_identity_w", "pad_gather_crop_w",
                "sampled_gather_w", "sampled_gather_inexact_w", "sampled_gather_one_row_w",
                "sampled_gather_tail_w"),
}  # fmt: skip
FACTS = tuple(f for group in FACT_GROUPS.values() for f in group)
LEARNED = ("cpu_stream_bytes", "run_sms")
# files before format 4 kept the first facts as a list, in this order
LEGACY_LIST = ("cores", "lanes", "sms", "l2_bytes", "cpu_stream_bytes", "run_sms")
# detected facts (``profiler.machine_facts``, ``codegen_facts``) whose name differs from the
# Machine field they fill; every other detected fact of the same name as a field fills it.
FACT_ALIASES = {"cpu_l2_bytes": "cpu_l2_bytes_per_core", "gpu_l2_bytes": "l2_bytes",
                "gpu_block_threads": "max_threads"}  # fmt: skip
# Not detected: SMT (a KVM guest shows no SMT topology: a facts file states it where known);
# LLVM's minimum trip count for loop vectorization (``-vectorizer-min-trip-count``, an option
# of the compiler, 16 on every target); and the L3, which is not taken either: a guest's sysfs
# reports a synthetic one (300 MiB on the reference machine, whose terms use its socket's
# 105 MB)
NOT_DETECTED = frozenset({"cpu_l3_bytes", "cpu_smt", "llvm_min_trip"})
NOT_TAKEN = frozenset({"cpu_l3_bytes"})


def _fact_value(field: str, value: Any) -> Any:
    """A stored or detected fact as the Machine field holds it (None: not a valid value)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (list, tuple)):
        ok = len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        return tuple(value) if ok else None
    if isinstance(value, (int, float)) and value >= 0:
        return int(value)
    return None


def machine_from_facts(m: Machine, facts: dict[str, Any]) -> Machine:
    """``m`` with the facts of ``facts`` that name a field (or an alias) and have a valid
    value (a positive number, or a pair of integers); everything else kept."""
    changes = {}
    for key, value in facts.items():
        field = FACT_ALIASES.get(key, key)
        if field not in FACTS or field in NOT_TAKEN:
            continue
        v = _fact_value(field, value)
        if v is not None and (not isinstance(v, int) or v > 0):
            changes[field] = v
    return dataclasses.replace(m, **changes) if changes else m


def from_detected(facts: dict[str, Any], families: set[str], **known: Any) -> Machine:
    """The machine of detected ``facts`` (plus ``known`` fields, e.g. from the samples),
    the reference's for what neither states, with a :class:`MachineFactWarning` naming the
    facts the predictor's ``families`` need and took from the reference."""
    m = machine_from_facts(dataclasses.replace(reference(), **known), facts)
    stated = {FACT_ALIASES.get(k, k) for k, v in facts.items() if v is not None} | set(known)
    needed = [f for g in ("cpu", "codegen") if "cpu" in families for f in FACT_GROUPS[g]]
    needed += list(FACT_GROUPS["gpu"]) if "gpu" in families else []
    missing = [f for f in needed if f not in stated and f not in NOT_DETECTED]
    if missing:
        warnings.warn(
            f"the samples' machine facts do not state {', '.join(missing)}: the predictor takes "
            "the reference machine's (the shipped predictor's); profile on the target "
            "(`codl-tvm profile`) to detect them", MachineFactWarning, stacklevel=3)
    return m


def machine_json(m: Machine, version: int = ALL_FACTS_FROM) -> dict[str, Any] | list[int]:
    """Every fact by name, then the learned fields that are set; a file of format 2 saved
    again (after ``calibrate``) keeps its list where its other facts are the reference's."""
    if version < BY_NAME_FROM and all(
            getattr(m, f) == getattr(reference(), f) for f in FACTS if f not in LEGACY_LIST):
        values = [getattr(m, f) for f in LEGACY_LIST]
        return values if m.run_sms else values[:-1]
    doc: dict[str, Any] = {}
    for f in FACTS + LEARNED:
        v = getattr(m, f)
        if f in FACTS or v:
            doc[f] = list(v) if isinstance(v, tuple) else v
    return doc


def load_machine(doc: dict[str, Any] | list[int], version: int = ALL_FACTS_FROM) -> Machine:
    """The machine of a predictor file (format ``version``); a file before
    :data:`ALL_FACTS_FROM` takes the facts it does not name from the reference machine, which
    every such file was trained on."""
    if isinstance(doc, list):
        doc = dict(zip(LEGACY_LIST, doc, strict=False))
    unknown = set(doc) - set(FACTS + LEARNED)
    if unknown:
        raise ValueError(f"unknown machine facts {sorted(unknown)}; known: {FACTS + LEARNED}")
    missing = [f for f in FACTS if f not in doc]
    if missing and version >= ALL_FACTS_FROM:
        raise ValueError(f"the predictor file's machine lacks {', '.join(missing)}")
    values = {}
    for f, v in doc.items():
        values[f] = _fact_value(f, v)
        if values[f] is None:
            raise ValueError(f"machine fact {f}: {v!r} is not a count or a pair of counts")
    base = reference() if missing else None
    return Machine(**{**({f: getattr(base, f) for f in FACTS} if base else {}), **values})


@cache
def reference() -> Machine:
    """The reference machine: the one the shipped predictor was trained on (its file), with
    the kernel variants its samples were built with."""
    doc = json.loads(REFERENCE_FILE.read_text())
    return dataclasses.replace(load_machine(doc["model"]["machine"], doc["version"]),
                               variants=KernelVariants.from_stored(doc["model"].get("variants")))


def variants_json(v: KernelVariants) -> dict[str, Any]:
    """The variants a file must state: those that differ from what a file without them
    means (the defaults, or for a field files from before it lack, ``tiling.variants.BEFORE``:
    ``KernelVariants.from_stored``)."""
    unstated = {**KernelVariants().to_json(), **BEFORE}
    return {k: x for k, x in v.to_json().items() if x != unstated[k]}


def row_family(row: dict[str, Any]) -> str:
    """``cpu`` for an llvm kernel whatever its role (the cpu-pair's "gpu" is llvm too)."""
    return "cpu" if '"llvm"' in str(row.get("target", "")) else "gpu"


def machine_from_samples(rows: list[dict[str, Any]], facts: dict[str, Any],
                         families: set[str]) -> Machine:
    """Cores, SIMD lanes and SMs recorded in the samples' blocking columns; the rest and the
    kernel variants the samples were built with from the machine ``facts`` detected where
    they were profiled (:func:`from_detected`: the reference machine's, with a warning,
    for what the predictor's ``families`` need and no fact states)."""
    # the blocking columns of the conv kernels state the machine: cores/lanes, SMs
    main = {
        "cpu": {"direct-nchwc", "gemm-1x1", "winograd-2x2-3x3"},
        "gpu": {"gpu-conv-tiled", "gpu-conv-tiled-split-k", "implicit-gemm", "direct"},
    }
    known = {}
    for field, fam, col in (("cores", "cpu", "cores"), ("lanes", "cpu", "unit"),
                            ("sms", "gpu", "cores")):
        vals = Counter(r[col] for r in rows if row_family(r) == fam and r["algorithm"] in main[fam])
        if vals:
            known[field] = int(vals.most_common(1)[0][0])
    return dataclasses.replace(from_detected(facts, families, **known),
                               variants=KernelVariants.from_stored(facts.get("kernel_variants")))
