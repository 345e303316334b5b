"""What every predictor shares: fitting on sample rows, Eq. 2 composition, JSON files."""

from __future__ import annotations

import json
import math
import operator
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from codl_tvm.predictor import calibration
from codl_tvm.predictor.file_format import (
    compact_json,
    compact_ranges,
    expand_ranges,
    round_floats,
)
from codl_tvm.predictor.opspec import SHARING_KINDS, OpSpec
from codl_tvm.predictor.sharing import SharingModel

from ..outputs import write_text

# 2: roles of one trained range share one entry ("cpu,gpu"); 3: a codl file leaves its tied
# units out (0, derived at load from their source models, ``ties.py``)
FORMAT_VERSION = 5  # 4: machine facts by name; 5: all of them (machine.ALL_FACTS_FROM)
READS_VERSIONS = (1, 2, 3, 4, 5)
RANGE_FIELDS = ("out_h", "out_w", "IC", "OC", "reduction")
_range_values = operator.attrgetter(*RANGE_FIELDS)  # one C call per check, not five getattr
REGISTRY: dict[str, type[BasePredictor]] = {}
# modules whose classes register a kind (imported on demand, so the package imports light)
KIND_MODULES = ("codl_tvm.predictor.baselines", "codl_tvm.predictor.codl",
                "codl_tvm.predictor.gbdt")


def registry() -> dict[str, type[BasePredictor]]:
    """Every predictor kind, by name."""
    import importlib

    for name in KIND_MODULES:
        importlib.import_module(name)
    return REGISTRY


class PredictorFileError(ValueError):
    """A predictor file that is not one this version can load."""


class OutOfRangeWarning(UserWarning):
    """A prediction for a shape outside the range the predictor was trained on."""


class PairMismatchWarning(UserWarning):
    """A predictor used to plan for a device pair (or machine) it was not trained on."""


class PairMismatchError(ValueError):
    """:meth:`BasePredictor.check_pair` with ``strict``: the predictor is another pair's."""


def _pair_name(pair: Any) -> str:
    if isinstance(pair, str):
        return pair
    if isinstance(pair, dict):
        return str(pair.get("name", ""))
    return str(getattr(pair, "name", ""))


def sub_spec(row: dict[str, Any]) -> OpSpec:
    """The sub-op a compute sample row measured."""
    _, left, _, right = (int(p) for p in str(row["padding"]).split(":"))
    groups = row["groups"]
    if groups > 1:  # channel parts keep whole groups
        groups = row["sub_IC"] // (row["IC"] // groups)
    pad = (row["sub_pad_top"], left, row["sub_pad_bottom"], right)
    return OpSpec(
        row["op"], row["sub_H"], row["sub_W"], row["sub_IC"], row["sub_OC"], row["KH"],
        row["KW"], row["SH"], row["SW"], pad, row["dilation"], groups,
    )  # fmt: skip


class BasePredictor(BaseEstimator, RegressorMixin):
    """A latency predictor of one device pair: kernels per processor plus sharing costs.

    ``fit(X)`` takes sample rows (``codl_tvm.profiler.read_samples``); ``y`` defaults to their
    ``latency_us``. ``predict(X)`` returns microseconds per row. ``predict_op`` gives CoDL's
    Eq. 2 for one op, dim, ratio and chain flag.
    """

    kind: ClassVar[str] = ""
    round_digits: ClassVar[int | None] = 5  # significant digits kept in the JSON file

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.kind:
            REGISTRY[cls.kind] = cls

    # ---- to implement -------------------------------------------------------------------
    def _fit_kernels(self, rows: list[dict[str, Any]], y: np.ndarray) -> None:
        raise NotImplementedError

    def _kernel_us(self, role: str, sub: OpSpec, algorithm: str | None) -> float:
        raise NotImplementedError

    def _model_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def _load_model(self, doc: dict[str, Any]) -> None:
        raise NotImplementedError

    # ---- sklearn API --------------------------------------------------------------------
    def fit(
        self,
        X: Sequence[dict[str, Any]],
        y: Sequence[float] | None = None,
        machine: dict[str, Any] | None = None,
    ) -> BasePredictor:
        """Fit on sample rows; ``machine``: the facts detected where they were profiled
        (``profiler.machine_facts``: caches, SMs, the kernel variants built), which predictors
        whose terms count them take before fitting."""
        rows = list(X)
        if not rows:
            raise ValueError("no samples to fit")
        pairs = {r["pair"] for r in rows}
        if len(pairs) != 1:
            raise ValueError(f"samples of several device pairs {sorted(pairs)}; fit one pair")
        yv = np.asarray([r["latency_us"] for r in rows] if y is None else y, dtype=float)
        comp = [i for i, r in enumerate(rows) if r["op"] not in SHARING_KINDS]
        if not comp:
            raise ValueError("no compute samples to fit")
        self.pair_ = rows[0]["pair"]
        self.train_machine_ = dict(machine or {})
        self._fit_kernels([rows[i] for i in comp], yv[comp])
        self.sharing_ = SharingModel().fit([r for r in rows if r["op"] in SHARING_KINDS])
        self.range_ = self._ranges([rows[i] for i in comp])
        self._warned: set[str] = set()
        return self

    def predict(self, X: Sequence[dict[str, Any]]) -> np.ndarray:
        out = []
        for r in X:
            if r["op"] in SHARING_KINDS:
                out.append(self.sharing_.cost(r["op"], r["role"], r["bytes"]))
            else:
                speed = self._speed(r["role"])
                out.append(self._kernel_us(r["role"], sub_spec(r), r["algorithm"]) * speed)
        return np.asarray(out, dtype=float)

    # ---- calibration to the machine at hand ---------------------------------------------
    def calibrate(
        self,
        X: Sequence[dict[str, Any]],
        min_samples: int = 3,
        machine: dict[str, Any] | None = None,
        gpu_passes: bool = True,
        time_weighted: bool = True,
        per_kernel: bool = False,
        min_kernel_samples: int = 10,
    ) -> BasePredictor:
        """Fit the predictor to the machine at hand from a few samples profiled there.

        - ``machine``: facts detected on the target (``profiler.machine_facts``), such as the
          SMs a process may use; predictors whose terms count them take them first.
        - ``speed_[role]`` becomes the median of measured / predicted latency over the compute
          samples of ``X`` on that processor, each weighted by its predicted time
          (:func:`~codl_tvm.predictor.fitting.time_weighted_median`: a plan sums op times;
          ``time_weighted=False``: the plain median).
          Two instances of the H100 machine ran the same CPU kernels up to 1.7x apart; the
          model's shape is kept, its time unit moves. The ratios are taken against the
          uncalibrated model, so calibrating again replaces the factors.
        - ``per_kernel``: a predictor that names its kernels (:meth:`_factor_key`; the codl
          kind) also gives each kernel with at least ``min_kernel_samples`` compute samples
          in ``X`` a factor of its own over its processor's, taken the same way. It carries a
          kernel priced one factor off on every shape (a kernel changed since the training
          samples), not one whose error depends on the shape: on the 8-SM oracle's rows it
          took CPU depthwise convs from 0.52 to 1.05 (measured / predicted) and GEMV from
          3.46 to 1.28, and GPU pools from 1.8 to 0.5-0.6 (``benchmarks/PREDICTOR.md``,
          "Calibration per kernel"). Off by default.
        - Sharing ops with samples in ``X`` are fitted anew: copies are a fact of the
          target's bus and memory, not a scale of the training machine's.
        - ``gpu_passes``: a predictor whose terms count the GPU's memory passes (the codl
          kind) first measures how long they take on the target (``speed_["gpu-passes"]``),
          and each processor's factor is taken after it; False leaves them as trained.

        Returns ``self``.
        """
        by_role = calibration.compute_rows_by_role(self.pair_, X, min_samples)
        if machine:
            self._use_machine(machine)
        self.speed_ = {}  # the ratios below are taken against the uncalibrated model
        extra = self._pass_speed(by_role.get("gpu", [])) if gpu_passes else {}
        self.speed_ = dict(extra)  # the roles' factors are taken under it
        self.speed_ = calibration.speed_factors(
            lambda role, r: self._kernel_us(role, sub_spec(r), r["algorithm"]),
            lambda role, r: self._factor_key(role, sub_spec(r), r["algorithm"]),
            by_role, time_weighted, min_kernel_samples if per_kernel else None) | extra
        self.sharing_ = calibration.refit_sharing(self.sharing_, self.pair_, X)
        return self

    def _factor_key(self, role: str, sub: OpSpec, algorithm: str | None) -> str | None:
        """The name of the kernel ``sub`` runs on ``role``, under which :meth:`calibrate`
        keeps a factor of its own (None here: one factor per processor)."""
        return None

    def _use_machine(self, machine: dict[str, Any]) -> None:
        """Take the target's detected facts (a predictor without such terms ignores them)."""

    def _pass_speed(self, rows: list[dict[str, Any]]) -> dict[str, float]:
        """Speed factors of the GPU's memory passes from its ``rows`` (none here)."""
        return {}

    def _speed(self, role: str) -> float:
        return getattr(self, "speed_", {}).get(role, 1.0)

    # ---- the pair it was made for -------------------------------------------------------
    def pair_mismatch(self, pair: Any) -> list[str]:
        """Why this predictor was not made for ``pair`` (a ``DevicePair``, its ``to_json``
        dict, or a name); empty where it was. Beyond the pair's name, predictors whose terms
        count the machine (the codl kind: cores, SMs) compare it with the pair's targets."""
        why = []
        if _pair_name(pair) != self.pair_:
            why.append("the pairs differ")
        if not isinstance(pair, str):
            why += self._machine_mismatch(pair)
        return why

    def _machine_mismatch(self, pair: Any) -> list[str]:
        """How the pair's targets differ from the machine the terms count (none here)."""
        return []

    def check_pair(self, pair: Any, strict: bool = False) -> BasePredictor:
        """Warn (one :class:`PairMismatchWarning` naming both pairs), or with ``strict`` raise
        :class:`PairMismatchError`, where ``pair`` is not the pair (or machine) this predictor
        was trained for; returns ``self`` (``PredictorCosts(load(f).check_pair(pair))``)."""
        why = self.pair_mismatch(pair)
        if why:
            msg = (f"the {self.kind} predictor of pair {self.pair_!r} is used for pair "
                   f"{_pair_name(pair)!r}: {'; '.join(why)}. Its predictions are for another "
                   "machine: profile this pair (`codl-tvm profile`) and train a predictor "
                   "on its samples (`codl-tvm train`)")  # fmt: skip
            if strict:
                raise PairMismatchError(msg)
            warnings.warn(msg, PairMismatchWarning, stacklevel=2)
        return self

    # ---- the planner's API --------------------------------------------------------------
    def kernel_us(self, role: str, sub: OpSpec) -> float:
        """Predicted latency of ``sub`` run alone on ``role`` (warns outside the trained range)."""
        self._check_range(role, sub)
        return self._kernel_us(role, sub, None) * self._speed(role)

    def predict_op(
        self, op: OpSpec, dim: str, ratio: float, chain: bool = False
    ) -> dict[str, float]:
        """CoDL Eq. 2 for ``op`` split on ``dim`` with GPU share ``ratio``.

        Returns
        -------
        dict
            ``cpu_us``, ``gpu_us`` (computation of each part, 0 for an empty part),
            ``share_us`` (transfers, slices, concat; 0 when ``chain``) and
            ``total_us = share_us + max(cpu_us, gpu_us)``.
        """
        parts = op.parts(dim, ratio)  # split once for both roles
        cpu, gpu = parts["cpu"], parts["gpu"]
        cpu_us = self.kernel_us("cpu", cpu) if cpu is not None else 0.0
        gpu_us = self.kernel_us("gpu", gpu) if gpu is not None else 0.0
        share_us = self.sharing_.op_cost(op, dim, ratio, chain, parts)
        return {"cpu_us": cpu_us, "gpu_us": gpu_us, "share_us": share_us,
                "total_us": share_us + max(cpu_us, gpu_us)}  # fmt: skip

    # ---- range --------------------------------------------------------------------------
    @staticmethod
    def _ranges(rows: list[dict[str, Any]]) -> dict[str, list[list[int]]]:
        out: dict[str, list[list[int]]] = {}
        for role in ("gpu", "cpu"):
            specs = [sub_spec(r) for r in rows if r["role"] == role]
            if specs:
                vals = [[getattr(s, f) for s in specs] for f in RANGE_FIELDS]
                out[role] = [[min(v), max(v)] for v in vals]
        return out

    def out_of_range(self, role: str, sub: OpSpec) -> list[tuple[str, int, int, int]]:
        """``(field, value, lo, hi)`` of each field of ``sub`` outside the trained range."""
        if role not in self.range_:
            raise ValueError(f"predictor of {self.pair_!r} has no samples for processor {role!r}")
        fields = zip(RANGE_FIELDS, _range_values(sub), self.range_[role], strict=False)
        return [(f, v, lo, hi) for f, v, (lo, hi) in fields if not lo <= v <= hi]

    def _check_range(self, role: str, sub: OpSpec) -> None:
        bounds = self.range_.get(role)
        if bounds is not None:  # in range, the common case: no list built, no warning
            for v, (lo, hi) in zip(_range_values(sub), bounds, strict=False):
                if not lo <= v <= hi:
                    break
            else:
                return
        for field, val, lo, hi in self.out_of_range(role, sub):
            key = f"{role}.{field}"
            if key not in self._warned:
                self._warned.add(key)
                warnings.warn(
                    f"{sub.kind} on {role}: {field}={val} is outside the trained range "
                    f"[{lo}, {hi}] of this {self.kind} predictor; the prediction extrapolates",
                    OutOfRangeWarning,
                    stacklevel=3,
                )

    # ---- files --------------------------------------------------------------------------
    def _format_version(self) -> int:
        """The format this predictor is saved in: the current one, but a predictor loaded from
        a file before format 3 (tied units stored) keeps storing them (format 2), so saving it
        again, e.g. after ``calibrate``, changes none of its units."""
        loaded = getattr(self, "_loaded_version", FORMAT_VERSION)
        return FORMAT_VERSION if loaded >= 3 else 2

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "version": self._format_version(),
            "pair": self.pair_,
            "params": self.get_params(),
            "range": compact_ranges(self.range_),
            "sharing": self.sharing_.to_json(),
            **({"trained_on": self.trained_on_} if getattr(self, "trained_on_", None) else {}),
            **({"speed": self.speed_} if getattr(self, "speed_", None) else {}),
            "model": (
                round_floats(self._model_json(), self.round_digits)
                if self.round_digits
                else self._model_json()
            ),
        }

    @property
    def train_command(self) -> str | None:
        """The ``codl-tvm train`` command that made this predictor (None: not from a file)."""
        samples = getattr(self, "trained_on_", {}).get("samples")
        if samples is None:
            return None
        return f"codl-tvm train {samples}" + (f" --kind {self.kind}" if self.kind != "codl" else "")

    @property
    def size_bytes(self) -> int:
        """Bytes of the compact JSON document (all the predictor is)."""
        return len(compact_json(self.to_json()))

    def save(self, path: str | Path, inputs: tuple[str | Path, ...] = ()) -> None:
        """Write the predictor JSON atomically; ``path`` may not be one of ``inputs``."""
        write_text(path, compact_json(self.to_json()), inputs)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> BasePredictor:
        obj = cls(**doc.get("params", {}))
        obj.pair_, obj.range_ = doc["pair"], expand_ranges(doc["range"])
        obj.sharing_ = SharingModel(doc["sharing"])
        obj._warned = set()
        obj._loaded_version = doc["version"]
        if "trained_on" in doc:
            obj.trained_on_ = doc["trained_on"]
        if "speed" in doc:
            speed = {str(k): float(v) for k, v in doc["speed"].items()}
            if not all(math.isfinite(v) and v > 0 for v in speed.values()):
                raise ValueError(f"speed factors must be positive numbers: {doc['speed']}")
            obj.speed_ = speed
        obj._load_model(doc["model"])
        return obj


def load(path: str | Path) -> BasePredictor:
    """Load a predictor saved with ``save``; wrong kind or version is a clear error."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise PredictorFileError(f"{path}: not a predictor JSON file ({err})") from None
    if not isinstance(doc, dict) or "kind" not in doc:
        raise PredictorFileError(f"{path}: not a predictor file (no 'kind')")
    if doc["kind"] not in registry():
        raise PredictorFileError(
            f"{path}: unknown predictor kind {doc['kind']!r}; known: {sorted(REGISTRY)}"
        )
    if doc.get("version") not in READS_VERSIONS:
        raise PredictorFileError(
            f"{path}: predictor format version {doc.get('version')!r}, this codl-tvm reads "
            f"versions {', '.join(map(str, READS_VERSIONS))}; retrain it with `codl-tvm train`"
        )
    try:
        return REGISTRY[doc["kind"]].from_json(doc)
    except (KeyError, TypeError, ValueError) as err:
        raise PredictorFileError(f"{path}: malformed {doc['kind']} predictor ({err!r})") from None
