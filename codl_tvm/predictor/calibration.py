"""Calibration to the machine at hand: the factors :meth:`BasePredictor.calibrate` takes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from codl_tvm.predictor.fitting import time_weighted_median
from codl_tvm.predictor.opspec import SHARING_KINDS
from codl_tvm.predictor.sharing import SharingModel


def compute_rows_by_role(pair: str, X: Any, min_samples: int) -> dict[str, list[dict]]:
    """The compute samples of ``X`` per processor; a clear error where ``X`` has too few,
    or samples of another pair."""
    rows = [r for r in X if r["op"] not in SHARING_KINDS]
    pairs = {r["pair"] for r in rows}
    if not rows or pairs != {pair}:
        raise ValueError(f"calibration needs compute samples of pair {pair!r}; "
                         f"got {sorted(pairs) or 'none'}")  # fmt: skip
    by_role = {role: [r for r in rows if r["role"] == role]
               for role in sorted({r["role"] for r in rows})}  # fmt: skip
    for role, sel in by_role.items():
        if len(sel) < min_samples:
            raise ValueError(f"calibration needs >= {min_samples} compute samples of "
                             f"{role}, got {len(sel)}")  # fmt: skip
    return by_role


def speed_factors(raw_us: Callable[[str, dict], float],
                  kernel_of: Callable[[str, dict], str | None], by_role: dict[str, list[dict]],
                  time_weighted: bool, min_kernel_samples: int | None) -> dict[str, float]:
    """Each processor's factor, the median of measured / predicted (``raw_us(role, row)``:
    the uncalibrated prediction of a sample row); with ``min_kernel_samples``, each kernel's
    (``kernel_of(role, row)``; None: none) factor over its processor's where it has that many
    samples."""
    speed: dict[str, float] = {}
    for role, sel in by_role.items():
        raw = np.array([raw_us(role, r) for r in sel])
        ratios = np.array([r["latency_us"] for r in sel], dtype=float) / raw
        speed[role] = factor(ratios, raw, time_weighted)
        if min_kernel_samples is None:
            continue
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(sel):
            key = kernel_of(role, r)
            if key is not None:
                groups.setdefault(key, []).append(i)
        speed |= {key: factor(ratios[idx] / speed[role], raw[idx], time_weighted)
                  for key, idx in sorted(groups.items()) if len(idx) >= min_kernel_samples}
    return speed


def factor(ratios: np.ndarray, raw: np.ndarray, time_weighted: bool) -> float:
    """The median of ``ratios``, each weighted by its predicted time ``raw`` unless not
    ``time_weighted``."""
    return time_weighted_median(ratios, raw) if time_weighted else float(np.median(ratios))


def refit_sharing(model: SharingModel, pair: str, X: Any) -> SharingModel:
    """``model`` with the sharing ops that have samples in ``X`` fitted anew."""
    shared = [r for r in X if r["op"] in SHARING_KINDS and r["pair"] == pair]
    if not shared:
        return model
    refit = SharingModel().fit(shared).params
    if not any(r["op"] == "sync" for r in shared):
        refit.pop("sync_us")
    return SharingModel({**model.params, **refit})
