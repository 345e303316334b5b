"""Fits shared by the predictors: non-negative, on relative error, robust to a few outliers."""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

IRLS_ITERS = 5
IRLS_FLOOR = 0.02  # relative residual below which a sample's weight stops growing


def robust_rel_fit(a: np.ndarray, y: np.ndarray, iters: int = IRLS_ITERS,
                   offset: np.ndarray | None = None) -> np.ndarray:
    """Non-negative coefficients ``c`` minimising ~ sum |(a @ c + offset) / y - 1| (IRLS over
    NNLS); ``offset``: the part of each sample's time already known (default none).

    Non-negative: a unit of work (or a byte copied) never takes negative time. Relative:
    +-10% accuracy counts small relative errors, and a 10 us copy matters as much as a 10 ms
    one. Re-weighted a few times towards the least absolute relative error, so a few noisy
    samples do not pull the fit off the many good ones.
    """
    rel = a / y[:, None]
    scale = rel.max(axis=0)
    scale[scale <= 0] = 1.0
    rel = rel / scale
    target = np.ones(len(y)) if offset is None else 1.0 - offset / y
    w = np.ones(len(y))
    coef = np.zeros(a.shape[1])
    for _ in range(iters + 1):
        coef, _ = nnls(rel * w[:, None], target * w)
        w = 1.0 / np.sqrt(np.maximum(np.abs(rel @ coef - target), IRLS_FLOOR))
    return coef / scale


def rel_fit(a: np.ndarray, y: np.ndarray, mask: list[int]) -> list[float]:
    """Least squares on relative error over columns ``mask`` (others 0), columns rescaled.

    The baselines' fit (unconstrained, no re-weighting).
    """
    sub = a[:, mask] / y[:, None]
    scale = np.abs(sub).max(axis=0)
    scale[scale == 0] = 1.0
    coef, *_ = np.linalg.lstsq(sub / scale, np.ones(len(y)), rcond=None)
    out = [0.0] * a.shape[1]
    for i, c in zip(mask, coef / scale, strict=False):
        out[i] = float(c)
    return out


def time_weighted_median(ratios: np.ndarray, times: np.ndarray) -> float:
    """The median of ``ratios`` with each weighted by its sample's ``times``.

    A calibration's speed factor: a plan's latency is a sum of op times, so the factor that
    prices the sum right is the one the long ops agree on. A plain median lets the many short
    ops of a random draw set it, and on the GPU machine's CPU they run faster against the
    predictor than the long ones (benchmarks/PREDICTOR.md, "Calibration").
    """
    order = np.argsort(ratios)
    cum = np.cumsum(np.asarray(times, dtype=float)[order])
    return float(np.asarray(ratios, dtype=float)[order][np.searchsorted(cum, cum[-1] / 2)])
