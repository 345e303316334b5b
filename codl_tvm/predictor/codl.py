"""CoDL's non-linearity-extracted predictor (MobiSys'22 Eq. 3 and Table 1).

Per (processor, kernel kind, filter-size variant) the analytic blocking of the codl-tvm
kernel (:mod:`codl_tvm.predictor.blocking`) gives the staircase terms: waves of parallel
tasks (CPU cores) or thread blocks (GPU SMs) times the work of one task, plus the parallel
memory passes the kernel makes (padding, weight packing, unpacking). Only the time of one
basic unit of each term is learned, plus a fixed launch/dispatch cost ``t0``::

    T = t0 + sum_k t_k * term_k(H, W, IC, OC, KH, KW, stride; cores, lanes, SMs)

The unit times are fitted non-negative (a unit of work never takes negative time) on the
*relative* error, and re-weighted a few times towards the least absolute relative error
(IRLS): a few noisy samples should not pull the fit off the many good ones, and +-10%
accuracy is a count of small relative errors.
"""

from __future__ import annotations

import copy
import dataclasses
import operator
import warnings
from collections import defaultdict
from typing import Any

import numpy as np

from codl_tvm import tiling
from codl_tvm.predictor.base import FORMAT_VERSION, BasePredictor, sub_spec
from codl_tvm.predictor.blocking import (
    ANALYTIC,
    BY_FILTER,
    VARIANT_FALLBACK,
    Machine,
    kernel_kind,
    model_algorithm,
    recorded_terms,
    terms,
    variant,
)
from codl_tvm.predictor.codl_format import current_key, flat_models, trim_zeros
from codl_tvm.predictor.fitting import IRLS_ITERS, robust_rel_fit
from codl_tvm.predictor.gpu_passes import PASS_SPEED, fit_pass_speed, scale_passes
from codl_tvm.predictor.machine import (
    load_machine,
    machine_from_facts,
    machine_from_samples,
    machine_json,
    row_family,
    variants_json,
)
from codl_tvm.predictor.mirror import kernel, transposed_kernel
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.predictor.ties import TIES_DERIVED_FROM, retied, tie_order, tied_units, untied
from codl_tvm.tiling.variants import KernelVariants


class AlgorithmFallbackWarning(UserWarning):
    """A sub-op whose kernel has no model: predicted with another kernel's model."""


class CoDLPredictor(BasePredictor):
    """CoDL's light predictor: analytic blocking terms times learned basic-unit times.

    One model per (role, kernel kind, algorithm[, filter-size variant]), keyed
    ``role/kind/algorithm[/k1|kn]``. A sample row trains the model of the algorithm it
    recorded; a prediction uses the algorithm codl-tvm's dispatch table picks for the sub-op
    (:func:`codl_tvm.predictor.mirror.kernel`), so both name the same model. Kernels of
    codl-tvm's schedules use the analytic blocking of :mod:`codl_tvm.predictor.blocking`;
    other kernels fall back to Eq. 3 on the blocking recorded in the samples.

    Parameters
    ----------
    irls_iters : int
        Re-weighting rounds towards least absolute relative error (0: plain relative LS).
    cpu_stream_bytes : int or None
        Size of a parallel CPU pass beyond which it streams past the caches (a cache-regime
        change of pools, elementwise ops and GEMV). None: learned from the samples, the
        candidate of :data:`STREAM_CANDIDATES_BYTES` whose fit puts most training samples
        within +-10%; 0: the Sapphire Rapids rule (L2 of cores / 2 physical cores).

    Attributes
    ----------
    t_ : dict
        Learned unit times per model key (``t0`` first, then one per blocking term).
    floor_us_ : dict
        Per GPU model key, its fastest training sample: the least it predicts (the launch
        floor, see :data:`FLOOR_FAMILIES`).
    machine_ : Machine
        Cores, SIMD lanes, SMs and cache limits the terms are computed for.
    """

    kind = "codl"
    # 3 significant digits: a unit time moves predictions by at most 0.4% (the H100 file:
    # 0.37%), far inside the samples' visit-to-visit spread, and frees ~100 B of the 2 KB
    round_digits = 3

    def __init__(self, irls_iters: int = IRLS_ITERS, cpu_stream_bytes: int | None = None
                 ) -> None:
        self.irls_iters = irls_iters
        self.cpu_stream_bytes = cpu_stream_bytes

    def _fit_kernels(self, rows: list[dict[str, Any]], y: np.ndarray) -> None:
        self.family_ = {r["role"]: row_family(r) for r in rows}
        groups: dict[str, list[int]] = defaultdict(list)
        subs = [sub_spec(r) for r in rows]
        facts = getattr(self, "train_machine_", None) or {}
        self.machine_ = machine_from_samples(rows, facts, set(self.family_.values()))
        for i, (r, s) in enumerate(zip(rows, subs, strict=True)):
            groups[self._key(r["role"], s, r["algorithm"])].append(i)
        stream = self.cpu_stream_bytes
        if stream is None:
            stream = self._learn_stream_bytes(groups, subs, y)
        self.machine_ = dataclasses.replace(self.machine_, cpu_stream_bytes=int(stream))
        self.t_: dict[str, Any] = {}
        for key in tie_order(groups, self.family_):  # a tied model after its sources
            idx = groups[key]
            role, _, algo = key.split("/")[:3]
            fam = self.family_[role]
            if algo in ANALYTIC[fam]:
                self.t_[key] = self._fit_group(key, [subs[i] for i in idx], y[idx])
            else:
                cols = ("block", "unit", "cores")
                blk = [int(np.median([rows[i][c] for i in idx])) for c in cols]
                a = np.array([recorded_terms(subs[i], *blk) for i in idx])
                self.t_[key] = {"b": blk, "t": _fit(a, y[idx], self.irls_iters)}
        self.t_ = dict(sorted(self.t_.items()))  # the file's order, whatever the fits' order
        self.floor_us_ = self._launch_floors(groups, y)
        self._index()

    def _launch_floors(self, groups: dict[str, list[int]], y: np.ndarray) -> dict[str, float]:
        """Per floored model, its fastest training sample; a model of fewer than
        :data:`FLOOR_MIN_SAMPLES` samples (a quick profile) takes its role's fastest instead,
        so a few large samples cannot lift the floor of the small ops of that kernel."""
        floored = {k: idx for k, idx in groups.items()
                   if self.family_[k.split("/")[0]] in FLOOR_FAMILIES}  # fmt: skip
        role_min: dict[str, float] = {}
        for key, idx in floored.items():
            role = key.split("/")[0]
            role_min[role] = min(role_min.get(role, np.inf), float(y[idx].min()))
        out = {}
        for key, idx in floored.items():
            own = len(idx) >= FLOOR_MIN_SAMPLES
            out[key] = float(f"{y[idx].min() if own else role_min[key.split('/')[0]]:.3g}")
        return out

    def _fit_group(self, key: str, subs: list[OpSpec], y: np.ndarray) -> list[float]:
        role, _, algo = key.split("/")[:3]
        fam = self.family_[role]
        a = np.array([terms(fam, s, self.machine_, algo) for s in subs])
        tied = tied_units(key, self.family_, self.t_)
        if not tied:
            return _fit(a, y, self.irls_iters)
        free = [j for j in range(a.shape[1]) if j not in tied]
        offset = sum(a[:, col] * unit for col, unit in tied.items())
        coef = robust_rel_fit(a[:, free], y, self.irls_iters, offset=offset)
        out = [0.0] * a.shape[1]
        for j, c in zip(free, coef, strict=True):
            out[j] = float(c)
        for col, unit in tied.items():
            out[col] = unit
        return out

    def _learn_stream_bytes(self, groups: dict[str, list[int]], subs: list[OpSpec],
                            y: np.ndarray) -> int:
        """The candidate limit whose fits of the CPU models that depend on it put most
        training samples within +-10% (ties: the smaller median relative error)."""
        def machine(limit: int) -> Machine:
            return dataclasses.replace(self.machine_, cpu_stream_bytes=limit)

        lo, hi = machine(STREAM_CANDIDATES_BYTES[0]), machine(STREAM_CANDIDATES_BYTES[-1])
        cases = []  # (family, algorithm, sub-ops, latencies) of the groups the limit changes
        for key, idx in groups.items():
            role, _, algo = key.split("/")[:3]
            fam = self.family_[role]
            group = [subs[i] for i in idx]
            if fam == "cpu" and algo in ANALYTIC[fam] and any(
                    terms(fam, s, lo, algo) != terms(fam, s, hi, algo) for s in group):
                cases.append((fam, algo, group, y[idx]))
        if not cases:
            return 0

        def score(limit: int) -> tuple[int, float]:
            m = machine(limit)
            errs = []
            for fam, algo, group, yy in cases:
                a = np.array([terms(fam, s, m, algo) for s in group])
                errs.append(np.abs(a @ np.array(_fit(a, yy, self.irls_iters)) / yy - 1.0))
            err = np.concatenate(errs)
            return int((err <= 0.10).sum()), -float(np.median(err))

        return max(STREAM_CANDIDATES_BYTES, key=score)

    def in_model(self, footprint_bytes: int) -> CoDLPredictor:
        """This predictor for the ops of a model that touches ``footprint_bytes`` (weights and
        activations) per inference.

        Samples are timed back to back, so a kernel's weights stay in the GPU's L2 between
        calls. Inside a model whose footprint exceeds the L2, every other op evicts them
        first: the L2-dependent terms (the GEMV's) must then take the cold-cache regime.
        On the H100, moving ResNet-18's classifier (the model: 55 MB) to the CPU gained 86 us,
        three times what its warm-cache GPU time predicted; the GEMV's measured cold regime
        (weights beyond the L2: ~2x slower per step) accounts for the difference.
        """
        if footprint_bytes <= self.machine_.l2_bytes:
            return self
        other = copy.copy(self)
        other.machine_ = dataclasses.replace(self.machine_, l2_bytes=0)
        return other

    def algorithm(self, role: str, sub: OpSpec) -> str:
        """The kernel algorithm codl-tvm runs ``sub`` with on ``role`` (the samples' label)."""
        return kernel(self.family_.get(role, role), sub, self.machine_).algorithm

    def transposed_conv_us(self, role: str, sub: OpSpec) -> float:
        """A conv2d_transpose on ``role``, ``sub`` being the stride-1 conv over its dilated
        input, on the kernel the dispatch runs it with (:func:`~.mirror.transposed_kernel`)."""
        algo = transposed_kernel(self.family_.get(role, role), sub, self.machine_).algorithm
        return self._kernel_us(role, sub, algo) * self._speed(role)

    def _key(self, role: str, sub: OpSpec, algorithm: str | None) -> str:
        algo = model_algorithm(algorithm or self.algorithm(role, sub))
        key = f"{role}/{kernel_kind(sub)}/{algo}"
        return f"{key}/{variant(sub)}" if algo in BY_FILTER else key

    def _index(self) -> None:
        self._fallback: dict[str, str] = {}
        self._warned_algo: set[str] = set()

    def _fallback_key(self, key: str) -> str | None:
        """A model of the same role and kind for a kernel without one: the same algorithm's
        fallback variant (:data:`VARIANT_FALLBACK`) first, then the same filter-size variant,
        then the analytic ones, then by name (deterministic)."""
        if key not in self._fallback:
            role, kind = key.split("/")[:2]
            head, _, last = key.rpartition("/")
            near = f"{head}/{VARIANT_FALLBACK[last]}" if last in VARIANT_FALLBACK else None
            same = [k for k in self.t_ if k.split("/")[:2] == [role, kind]]
            tail = key.split("/")[3:]

            def rank(k: str) -> tuple[bool, bool, bool, str]:
                return (k != near, k.split("/")[3:] != tail, isinstance(self.t_[k], dict), k)

            self._fallback[key] = min(same, key=rank) if same else ""
        return self._fallback[key] or None

    def _factor_key(self, role: str, sub: OpSpec, algorithm: str | None) -> str:
        return self._key(role, sub, algorithm)

    def _kernel_us(self, role: str, sub: OpSpec, algorithm: str | None,
                   passes: float | None = None) -> float:
        key = self._key(role, sub, algorithm)
        # a calibrated kernel's own factor (``calibrate(per_kernel=True)``; keys hold a "/",
        # the processors' factors do not)
        own = getattr(self, "speed_", {}).get(key, 1.0)
        t = self.t_.get(key)
        if t is None:
            other = self._fallback_key(key)
            if other is None:
                raise ValueError(f"the codl predictor has no samples of {sub.kind} on {role}")
            self._warn_fallback(key, other)
            key, t = other, self.t_[other]
        if isinstance(t, dict):
            x = recorded_terms(sub, *t["b"])
            t = t["t"]
        else:
            algo = key.split("/")[2]
            x = terms(self.family_[role], sub, self.machine_, algo)
            if passes is None:  # as calibrated
                passes = getattr(self, "speed_", {}).get(PASS_SPEED)
            if passes and role == "gpu" and self.family_[role] == "gpu":
                x = scale_passes(x, algo, passes)
        # units x terms (a file trims trailing zero units: map stops at the shorter list)
        return max(sum(map(operator.mul, t, x)), self.floor_us_.get(key, 1e-3)) * own

    def _warn_fallback(self, key: str, other: str) -> None:
        # samples of kernels the mirror does not know (other schedules): by design, no warning
        fam = self.family_[key.split("/")[0]]
        if key.split("/")[2] not in ANALYTIC[fam] or isinstance(self.t_[other], dict):
            return
        if key not in self._warned_algo:
            self._warned_algo.add(key)
            why = _MISSING_WHY.get(key.split("/")[-1], _MISSING_WHY[""])
            warnings.warn(
                f"the codl predictor has no model {key!r} ({why}); predicting with "
                f"{other!r}: re-profile and retrain for accurate predictions",
                AlgorithmFallbackWarning,
                stacklevel=4,
            )

    def _pass_speed(self, rows: list[dict[str, Any]]) -> dict[str, float]:
        """How long the GPU's memory passes take on the target, from its GPU ``rows``
        (:mod:`codl_tvm.predictor.gpu_passes`): a GPU held to a few SMs streams bytes far
        slower than the one the terms were fitted on, while its compute slows with the SMs
        the waves already count."""
        if self.family_.get("gpu") != "gpu":
            return {}

        def predict_us(factor: float) -> list[float]:
            return [self._kernel_us("gpu", sub_spec(r), r["algorithm"], passes=factor)
                    for r in rows]

        factor = fit_pass_speed(predict_us, [r["latency_us"] for r in rows])
        return {PASS_SPEED: factor} if factor != 1.0 else {}

    def _use_machine(self, machine: dict[str, Any]) -> None:
        """The GPU's SMs detected on the target (``gpu_sms``) spread the waves of the GPU
        terms; the kernels stay tiled for the SMs of the compiler's arch (``machine_.sms``).
        The target's caches (:data:`FACTS_TO_MACHINE`) replace the training machine's."""
        self.machine_ = machine_from_facts(self.machine_, machine)
        sms = int(machine.get("gpu_sms") or 0)
        if sms:
            run = 0 if sms == self.machine_.sms else sms
            self.machine_ = dataclasses.replace(self.machine_, run_sms=run)

    def _machine_mismatch(self, pair: Any) -> list[str]:
        """The pair's CPU cores (``num-cores``) and GPU SMs (its ``gpu_sms``, else its arch's
        datasheet count, ``tiling.SMS``) against those the terms count (a GPU role that is
        llvm, the cpu-pair's, has none)."""
        spec = pair if isinstance(pair, dict) else {
            "cpu": getattr(pair, "cpu_spec", {}), "gpu": getattr(pair, "gpu_spec", {}),
            "gpu_sms": getattr(pair, "gpu_sms", None)}
        cpu, gpu = dict(spec.get("cpu") or {}), dict(spec.get("gpu") or {})
        m, why = self.machine_, []
        cores = cpu.get("num-cores")
        if cores and int(cores) != m.cores:
            why.append(f"its CPU terms count {m.cores} cores, the pair's CPU target "
                       f"{int(cores)}")  # fmt: skip
        kind = str(gpu.get("kind", ""))
        if self.family_.get("gpu") == "gpu" and kind and kind != "llvm" and gpu.get("arch"):
            sms = spec.get("gpu_sms") or tiling.sm_count(str(gpu["arch"]), kind)
            if sms != m.sms:
                why.append(f"its GPU terms count {m.sms} SMs, the pair's {gpu['arch']} {sms}")
        return why

    def _model_json(self) -> dict[str, Any]:
        m = self.machine_
        # 2 KB: no family map when every role is its own family (x86-cuda), the models
        # grouped by role, and no trailing zero units (a prediction sums units x terms)
        same = all(role == fam for role, fam in self.family_.items())
        by_role: dict[str, dict[str, Any]] = defaultdict(dict)
        for key, units in self.t_.items():
            role, rest = key.split("/", 1)
            if self._format_version() >= TIES_DERIVED_FROM:
                units = untied(units, tied_units(key, self.family_, self.t_))
            by_role[role][rest] = trim_zeros(units)
        return {
            "machine": machine_json(m, self._format_version()),
            # the kernel variants its samples were built with, where a file without them
            # would mean others (``variants_json``)
            **({"variants": stated} if (stated := variants_json(m.variants)) else {}),
            **({} if same else {"family": self.family_}),
            "t": dict(by_role),
            # one per floored key, in the sorted order of ``t``'s keys (no key names: 2 KB)
            "floor": [self.floor_us_[k] for k in sorted(self.t_) if k in self.floor_us_],
        }

    def _load_model(self, doc: dict[str, Any]) -> None:
        self.machine_ = dataclasses.replace(
            load_machine(doc["machine"], getattr(self, "_loaded_version", FORMAT_VERSION)),
            variants=KernelVariants.from_stored(doc.get("variants")))
        flat = flat_models(doc["t"])
        self.family_ = doc.get("family") or {k.split("/")[0]: k.split("/")[0] for k in flat}
        self.t_ = {}
        loaded = {current_key(k, v, self.family_): v for k, v in flat.items()}
        # format 3 leaves tied units out: derived again, sources first; earlier files stored
        # them and keep what they stored
        derive = getattr(self, "_loaded_version", TIES_DERIVED_FROM) >= TIES_DERIVED_FROM
        for key in tie_order(loaded, self.family_):
            tied = tied_units(key, self.family_, self.t_) if derive else {}
            self.t_[key] = retied(loaded[key], tied)
        self.t_ = dict(sorted(self.t_.items()))
        floored = [k for k in sorted(self.t_) if self.family_[k.split("/")[0]] in FLOOR_FAMILIES]
        floors = doc.get("floor", [])  # older files: no floors
        if floors and len(floors) != len(floored):
            raise ValueError(f"{len(floors)} launch floors for {len(floored)} GPU kernel models")
        self.floor_us_ = dict(zip(floored, map(float, floors), strict=False))
        self._index()


# why a model is missing, by the key's last part (a filter variant), for the fallback warning
_MISSING_WHY = {
    "k1s2": "its samples have no 1x1 stride-2 conv: profile with --downsample N",
    "": "its samples predate that kernel",
}

# Families whose kernels have a launch floor: no GPU kernel returns faster than its launch and
# completion (4.5 us on the H100 machine), while the linear terms of a tiny kernel sum to less
# (the GEMV model's t0 is 3.8 us; its 400x192 rows take 4.8-5.5 us). A prediction is at least
# the fastest training sample of its model. CPU kernels gain nothing from it (their smallest,
# a fork-join of 3-8 us, are fitted), so they keep a pure Eq. 3.
FLOOR_FAMILIES = frozenset({"gpu"})
FLOOR_MIN_SAMPLES = 8  # a model's own floor needs this many samples (a multi-kernel op's is higher)

# candidate limits of a streamed CPU pass: 256 KB (one small L2) to 256 MB (beyond any L3)
STREAM_CANDIDATES_BYTES = tuple(int(mb * (1 << 20)) for mb in (
    0.25, 0.5, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256))

def _fit(a: np.ndarray, y: np.ndarray, iters: int) -> list[float]:
    return [float(c) for c in robust_rel_fit(a, y, iters)]
