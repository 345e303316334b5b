"""Accuracy report: +-10% accuracy and MAPE per processor and op kind, size, prediction time."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from codl_tvm.predictor.base import BasePredictor, sub_spec
from codl_tvm.predictor.opspec import SHARING_KINDS, OpSpec


def split_rows(
    rows: Sequence[dict[str, Any]], test_size: float = 0.3, seed: int = 0
) -> tuple[list[dict], list[dict]]:
    """Random train/test split of sample rows (``test_size`` held out)."""
    rng = np.random.default_rng(seed)
    test = rng.random(len(rows)) < test_size
    train = [r for r, t in zip(rows, test, strict=True) if not t]
    return train, [r for r, t in zip(rows, test, strict=True) if t]


def split_models(
    rows: Sequence[dict[str, Any]], test_models: Sequence[str]
) -> tuple[list[dict], list[dict]]:
    """Train on every CNN (and the random/sharing rows) but ``test_models``; test on those."""
    held = set(test_models)
    return [r for r in rows if r["model"] not in held], [r for r in rows if r["model"] in held]


def _stats(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    err = np.abs(pred - meas) / meas
    return {"n": int(len(meas)), "acc10": float(np.mean(err <= 0.1)), "mape": float(np.mean(err))}


def predict_time_us(predictor: BasePredictor, ops: Sequence[OpSpec], repeat: int = 3) -> float:
    """Median microseconds of one ``predict_op`` call (OC split at 0.5, no chain).

    Every repeat gets fresh copies of the ops, so nothing an OpSpec caches is reused.
    """
    if not ops:
        return float("nan")
    best = []
    for _ in range(repeat):
        fresh = [OpSpec.from_json(op.to_json()) for op in ops]
        t0 = time.perf_counter()
        for op in fresh:
            predictor.predict_op(op, "OC", 0.5)
        best.append((time.perf_counter() - t0) / len(ops) * 1e6)
    return float(np.median(best))


def accuracy_rows(predictor: BasePredictor, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (processor, op) plus ``all`` per processor; compute and sharing samples."""
    pred = predictor.predict(rows)
    meas = np.array([r["latency_us"] for r in rows])
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r["role"], r["op"])].append(i)
        if r["op"] not in SHARING_KINDS:
            groups[(r["role"], "all")].append(i)
    out = []
    for (role, op), idx in sorted(groups.items()):
        out.append({"processor": role, "op": op, **_stats(pred[idx], meas[idx])})
    return out


def report(
    predictor: BasePredictor, rows: Sequence[dict[str, Any]], n_timed: int = 200
) -> dict[str, Any]:
    """The full report of a predictor on sample rows."""
    comp = [r for r in rows if r["op"] not in SHARING_KINDS]
    ops = _full_ops(comp[:n_timed])
    return {
        "kind": predictor.kind,
        "pair": predictor.pair_,
        "size_bytes": predictor.size_bytes,
        "predict_us_per_op": predict_time_us(predictor, ops),
        "rows": accuracy_rows(predictor, rows),
    }


def _full_ops(rows: Sequence[dict[str, Any]]) -> list[OpSpec]:
    """The unsplit ops behind sample rows (OC-splittable ones), to time ``predict_op``."""
    ops = []
    for r in rows:
        pad = r["padding"].split(":")
        full = {"sub_H": r["H"], "sub_W": r["W"], "sub_IC": r["IC"], "sub_OC": r["OC"]}
        full.update(sub_pad_top=int(pad[0]), sub_pad_bottom=int(pad[2]))
        spec = sub_spec({**r, **full})
        ops.append(spec)
    return ops


def format_table(rep: dict[str, Any]) -> str:
    lines = [
        f"predictor {rep['kind']} ({rep['pair']}): {rep['size_bytes']} bytes, "
        f"{rep['predict_us_per_op']:.1f} us per predict_op",
        f"{'processor':<9} {'op':<12} {'n':>5} {'acc10':>7} {'MAPE':>7}",
    ]
    for r in rep["rows"]:
        lines.append(
            f"{r['processor']:<9} {r['op']:<12} {r['n']:>5} {r['acc10']:>7.1%} {r['mape']:>7.1%}"
        )
    return "\n".join(lines)
