"""Gradient-boosted trees comparator (scikit-learn), stored as plain arrays, never pickle.

One ``GradientBoostingRegressor`` per processor on the sub-op's shape features plus the op
kind, predicting log latency (the fine-grained co-execution paper's GBDT, without its
TFLite-specific dispatch features). Prediction walks the stored trees itself.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.ensemble import GradientBoostingRegressor

from codl_tvm.predictor.base import BasePredictor, sub_spec
from codl_tvm.predictor.opspec import COMPUTE_KINDS, OpSpec


def features(sub: OpSpec) -> list[float]:
    return [
        float(COMPUTE_KINDS.index(sub.kind)), sub.out_h, sub.out_w, sub.IC, sub.OC, sub.KH,
        sub.SH, sub.groups, sub.reduction, math.log(sub.out_elems), math.log(max(sub.flops, 1)),
    ]  # fmt: skip


def _tree_json(tree: Any) -> list[list[float]]:
    t = tree.tree_
    return [
        t.children_left.tolist(), t.children_right.tolist(), t.feature.tolist(),
        [float(f"{v:.6g}") for v in t.threshold], [float(f"{v:.6g}") for v in t.value.ravel()],
    ]  # fmt: skip


def _walk(tree: list[list[float]], x: list[float]) -> float:
    left, right, feat, thr, val = tree
    node = 0
    while left[node] != -1:
        node = left[node] if x[feat[node]] <= thr[node] else right[node]
    return val[node]


class GBDTPredictor(BasePredictor):
    """Boosted trees on log latency (comparator for the accuracy table).

    Parameters
    ----------
    n_estimators, max_depth, learning_rate : sklearn GradientBoostingRegressor settings.
    """

    kind = "gbdt"
    round_digits = None  # the trees round their own numbers once, at fit time

    def __init__(self, n_estimators: int = 200, max_depth: int = 4, learning_rate: float = 0.1):
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate

    def _fit_kernels(self, rows: list[dict[str, Any]], y: np.ndarray) -> None:
        self.forest_: dict[str, dict[str, Any]] = {}
        for role in ("gpu", "cpu"):
            idx = [i for i, r in enumerate(rows) if r["role"] == role]
            if not idx:
                continue
            x = np.array([features(sub_spec(rows[i])) for i in idx])
            reg = GradientBoostingRegressor(
                n_estimators=self.n_estimators, max_depth=self.max_depth,
                learning_rate=self.learning_rate, random_state=0,
            ).fit(x, np.log(y[idx]))  # fmt: skip
            self.forest_[role] = {
                "init": float(reg.init_.constant_.ravel()[0]),
                "lr": self.learning_rate,
                "trees": [_tree_json(est[0]) for est in reg.estimators_],
            }

    def _kernel_us(self, role: str, sub: OpSpec, algorithm: str | None) -> float:
        forest = self.forest_.get(role)
        if forest is None:
            raise ValueError(f"the gbdt predictor has no samples on {role}")
        x = features(sub)
        log_us = forest["init"] + forest["lr"] * sum(_walk(t, x) for t in forest["trees"])
        return math.exp(log_us)

    def _model_json(self) -> dict[str, Any]:
        return {"forest": self.forest_}

    def _load_model(self, doc: dict[str, Any]) -> None:
        self.forest_ = doc["forest"]
