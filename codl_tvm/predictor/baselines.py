"""Baselines: muLayer's FLOPs-linear model and EOP's three performance patterns."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from codl_tvm.predictor.base import BasePredictor, sub_spec
from codl_tvm.predictor.fitting import rel_fit
from codl_tvm.predictor.opspec import OpSpec


def _by_group(rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[f"{r['role']}/{r['op']}"].append(i)
    return groups


def _missing(name: str, role: str, kind: str) -> ValueError:
    return ValueError(f"the {name} predictor has no samples of {kind} on {role}")


class FlopsPredictor(BasePredictor):
    """muLayer-style: latency linear in the sub-op's FLOPs, per (processor, op kind)."""

    kind = "flops"

    def _fit_kernels(self, rows: list[dict[str, Any]], y: np.ndarray) -> None:
        self.coef_: dict[str, list[float]] = {}
        for key, idx in _by_group(rows).items():
            a = np.array([[1.0, sub_spec(rows[i]).flops] for i in idx])
            self.coef_[key] = rel_fit(a, y[idx], [0, 1])

    def _kernel_us(self, role: str, sub: OpSpec, algorithm: str | None) -> float:
        coef = self.coef_.get(f"{role}/{sub.kind}")
        if coef is None:
            raise _missing(self.kind, role, sub.kind)
        return max(coef[0] + coef[1] * sub.flops, 1e-3)

    def _model_json(self) -> dict[str, Any]:
        return {"coef": self.coef_}

    def _load_model(self, doc: dict[str, Any]) -> None:
        self.coef_ = doc["coef"]


def _pattern_us(pattern: list[Any], size: float) -> float:
    kind, a, b, step = pattern
    if kind == "constant":
        return a
    if kind == "linear":
        return a + b * size
    return a + b * math.ceil(size / step)


class EOPPredictor(BasePredictor):
    """EOP (VEE'22 section 3.2): per (processor, op kind) the linear, staircase or constant
    pattern of latency over the partitioned output size, whichever errs least.

    Parameters
    ----------
    steps : int
        Candidate staircase step sizes tried (powers of two).
    """

    kind = "eop"

    def __init__(self, steps: int = 20) -> None:
        self.steps = steps

    def _fit_kernels(self, rows: list[dict[str, Any]], y: np.ndarray) -> None:
        self.patterns_: dict[str, list[Any]] = {}
        for key, idx in _by_group(rows).items():
            size = np.array([float(sub_spec(rows[i]).out_elems) for i in idx])
            self.patterns_[key] = self._best(size, y[idx])

    def _best(self, size: np.ndarray, y: np.ndarray) -> list[Any]:
        cands: list[list[Any]] = [["constant", float(np.median(y)), 0.0, 1]]
        a, b = rel_fit(np.stack([np.ones_like(size), size], 1), y, [0, 1])
        cands.append(["linear", a, b, 1])
        for k in range(self.steps):
            step = 2**k
            stairs = np.ceil(size / step)
            a, b = rel_fit(np.stack([np.ones_like(size), stairs], 1), y, [0, 1])
            cands.append(["staircase", a, b, step])

        def mape(p: list[Any]) -> float:
            pred = np.array([_pattern_us(p, s) for s in size])
            return float(np.mean(np.abs(pred - y) / y))

        return min(cands, key=mape)

    def _kernel_us(self, role: str, sub: OpSpec, algorithm: str | None) -> float:
        pattern = self.patterns_.get(f"{role}/{sub.kind}")
        if pattern is None:
            raise _missing(self.kind, role, sub.kind)
        return max(_pattern_us(pattern, sub.out_elems), 1e-3)

    def _model_json(self) -> dict[str, Any]:
        return {"patterns": self.patterns_}

    def _load_model(self, doc: dict[str, Any]) -> None:
        self.patterns_ = doc["patterns"]
