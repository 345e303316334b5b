"""CoDL's non-linearity-extracted predictor (MobiSys'22 Eq. 3 and Table 1).

Per (processor, op kind, algorithm): the blocking of the kernel gives the number of waves of
blocks over the cores and of basic units per block; only the time of one basic unit is learned,
linear in the sub-op's ``(H, W, IC, OC)`` (H, W of the output; IC as the reduction length
``IC * KH * KW / groups``, CoDL keeping one model per filter-size algorithm)::

    T = t0 + waves * units * (t1 + t2 * H + t3 * W + t4 * IC + t5 * OC)

``t0`` is the launch cost. Fitted by least squares on relative error.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from codl_tvm.predictor.base import BasePredictor, sub_spec
from codl_tvm.predictor.opspec import OpSpec

MIN_ROWS_FULL = 12  # fewer rows than this: learn t_unit as t1 + t4 * IC only


def _blocks(block: int, unit: int, cores: int, out: int) -> int:
    """waves * units of CoDL Eq. 3 (``block`` 0: an even share per core)."""
    size = block or math.ceil(out / cores)
    waves = math.ceil(math.ceil(out / size) / cores)
    return waves * math.ceil(size / unit)


def _features(sub: OpSpec, n: int) -> list[float]:
    return [1.0, n, n * sub.out_h, n * sub.out_w, n * sub.reduction, n * sub.OC]


def rel_fit(a: np.ndarray, y: np.ndarray, mask: list[int]) -> list[float]:
    """Least squares on relative error over columns ``mask`` (others 0), columns rescaled."""
    sub = a[:, mask] / y[:, None]
    scale = np.abs(sub).max(axis=0)
    scale[scale == 0] = 1.0
    coef, *_ = np.linalg.lstsq(sub / scale, np.ones(len(y)), rcond=None)
    out = [0.0] * a.shape[1]
    for i, c in zip(mask, coef / scale, strict=False):
        out[i] = float(c)
    return out


class CoDLPredictor(BasePredictor):
    """CoDL's light predictor: analytic blocking counts times a learned basic-unit time.

    Parameters
    ----------
    min_rows_full : int
        Groups with fewer samples learn a 2-term basic-unit time instead of all 5 terms.
    """

    kind = "codl"

    def __init__(self, min_rows_full: int = MIN_ROWS_FULL) -> None:
        self.min_rows_full = min_rows_full

    def _fit_kernels(self, rows: list[dict[str, Any]], y: np.ndarray) -> None:
        groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for i, r in enumerate(rows):
            groups[(r["role"], r["op"], r["algorithm"])].append(i)
        self.groups_: dict[str, dict[str, Any]] = {}
        algos: dict[tuple[str, str], Counter] = defaultdict(Counter)
        for (role, op, algo), idx in groups.items():
            mine = [rows[i] for i in idx]
            blocking = [int(np.median([r[c] for r in mine])) for c in ("block", "unit", "cores")]
            subs = [sub_spec(r) for r in mine]
            a = np.array([_features(s, _blocks(*blocking, s.out_elems)) for s in subs])
            mask = list(range(6)) if len(idx) >= self.min_rows_full else [0, 1, 4]
            coef = rel_fit(a, y[idx], mask)
            self.groups_[f"{role}/{op}/{algo}"] = {"blocking": blocking, "t": coef}
            algos[(role, op)][algo] += len(idx)
        self.default_algo_ = {f"{r}/{o}": c.most_common(1)[0][0] for (r, o), c in algos.items()}

    def _group(self, role: str, kind: str, algorithm: str | None) -> dict[str, Any]:
        default = self.default_algo_.get(f"{role}/{kind}")
        group = self.groups_.get(f"{role}/{kind}/{algorithm}")
        if group is None:  # an algorithm never seen in training: the usual one of this op
            group = self.groups_.get(f"{role}/{kind}/{default}")
        if group is None:
            raise ValueError(f"the codl predictor has no samples of {kind} on {role}")
        return group

    def _kernel_us(self, role: str, sub: OpSpec, algorithm: str | None) -> float:
        g = self._group(role, sub.kind, algorithm)
        t = g["t"]
        n = _blocks(*g["blocking"], sub.out_elems)
        unit = t[1] + t[2] * sub.out_h + t[3] * sub.out_w + t[4] * sub.reduction + t[5] * sub.OC
        return max(t[0] + n * unit, 1e-3)

    def _model_json(self) -> dict[str, Any]:
        return {"groups": self.groups_, "default": self.default_algo_}

    def _load_model(self, doc: dict[str, Any]) -> None:
        self.groups_, self.default_algo_ = doc["groups"], doc["default"]
