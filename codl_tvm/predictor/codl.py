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

from collections import Counter, defaultdict
from typing import Any

import numpy as np
from scipy.optimize import nnls

from codl_tvm.predictor.base import BasePredictor, sub_spec
from codl_tvm.predictor.blocking import (
    ANALYTIC,
    Machine,
    kernel_kind,
    recorded_terms,
    terms,
    variant,
)
from codl_tvm.predictor.opspec import OpSpec

IRLS_ITERS = 5
IRLS_FLOOR = 0.02  # relative residual below which a sample's weight stops growing


def rel_fit(a: np.ndarray, y: np.ndarray, mask: list[int]) -> list[float]:
    """Least squares on relative error over columns ``mask`` (others 0), columns rescaled.

    Kept for the baselines (unconstrained, no re-weighting).
    """
    sub = a[:, mask] / y[:, None]
    scale = np.abs(sub).max(axis=0)
    scale[scale == 0] = 1.0
    coef, *_ = np.linalg.lstsq(sub / scale, np.ones(len(y)), rcond=None)
    out = [0.0] * a.shape[1]
    for i, c in zip(mask, coef / scale, strict=False):
        out[i] = float(c)
    return out


def robust_rel_fit(a: np.ndarray, y: np.ndarray, iters: int = IRLS_ITERS) -> np.ndarray:
    """Non-negative coefficients ``c`` minimising ~ sum |a @ c / y - 1| (IRLS over NNLS)."""
    rel = a / y[:, None]
    scale = rel.max(axis=0)
    scale[scale <= 0] = 1.0
    rel = rel / scale
    w = np.ones(len(y))
    coef = np.zeros(a.shape[1])
    for _ in range(iters + 1):
        coef, _ = nnls(rel * w[:, None], w)
        w = 1.0 / np.sqrt(np.maximum(np.abs(rel @ coef - 1.0), IRLS_FLOOR))
    return coef / scale


def _family(row: dict[str, Any]) -> str:
    """``cpu`` for an llvm kernel whatever its role (the cpu-pair's "gpu" is llvm too)."""
    return "cpu" if '"llvm"' in str(row.get("target", "")) else "gpu"


class CoDLPredictor(BasePredictor):
    """CoDL's light predictor: analytic blocking terms times learned basic-unit times.

    Kernels of codl-tvm's schedules use the analytic blocking of
    :mod:`codl_tvm.predictor.blocking` (keyed ``role/kind/variant``); other kernels fall
    back to Eq. 3 on the blocking recorded in the samples (keyed ``role/kind/algorithm``).

    Parameters
    ----------
    irls_iters : int
        Re-weighting rounds towards least absolute relative error (0: plain relative LS).
    """

    kind = "codl"
    round_digits = 4

    def __init__(self, irls_iters: int = IRLS_ITERS) -> None:
        self.irls_iters = irls_iters

    def _fit_kernels(self, rows: list[dict[str, Any]], y: np.ndarray) -> None:
        self.machine_ = _machine(rows)
        self.family_ = {r["role"]: _family(r) for r in rows}
        groups: dict[str, list[int]] = defaultdict(list)
        subs = [sub_spec(r) for r in rows]
        for i, (r, s) in enumerate(zip(rows, subs, strict=True)):
            groups[self._key(r["role"], s, r["algorithm"])].append(i)
        self.t_: dict[str, Any] = {}
        for key, idx in sorted(groups.items()):
            if key.count("/") == 2:  # analytic
                fam = self.family_[key.split("/")[0]]
                a = np.array([terms(fam, subs[i], self.machine_) for i in idx])
                self.t_[key] = _fit(a, y[idx], self.irls_iters)
            else:
                cols = ("block", "unit", "cores")
                blk = [int(np.median([rows[i][c] for i in idx])) for c in cols]
                a = np.array([recorded_terms(subs[i], *blk) for i in idx])
                self.t_[key] = {"b": blk, "t": _fit(a, y[idx], self.irls_iters)}
        self._index()

    def _key(self, role: str, sub: OpSpec, algorithm: str | None) -> str:
        if algorithm is None or algorithm in ANALYTIC[self.family_.get(role, role)]:
            return f"{role}/{kernel_kind(sub)}/{variant(sub)}"
        return f"{role}/{kernel_kind(sub)}/{variant(sub)}/{algorithm}"

    def _index(self) -> None:
        # predict_op knows no algorithm: use the most sampled model of the (role, kind)
        seen: dict[str, Counter] = defaultdict(Counter)
        for key in self.t_:
            role, kind = key.split("/")[:2]
            seen[f"{role}/{kind}"][key] += 1 + (key.count("/") == 2)
        self._fallback = {k: c.most_common(1)[0][0] for k, c in seen.items()}

    def _kernel_us(self, role: str, sub: OpSpec, algorithm: str | None) -> float:
        key = self._key(role, sub, algorithm)
        t = self.t_.get(key)
        if t is None:
            key = self._fallback.get("/".join(key.split("/")[:2]), "")
            t = self.t_.get(key)
        if t is None:
            raise ValueError(f"the codl predictor has no samples of {sub.kind} on {role}")
        if isinstance(t, dict):
            x = recorded_terms(sub, *t["b"])
            t = t["t"]
        else:
            x = terms(self.family_[role], sub, self.machine_)
        return max(sum(c * v for c, v in zip(t, x, strict=False)), 1e-3)

    def _model_json(self) -> dict[str, Any]:
        m = self.machine_
        return {
            "machine": [m.cores, m.lanes, m.sms, m.l2_bytes],
            "family": self.family_,
            "t": self.t_,
        }

    def _load_model(self, doc: dict[str, Any]) -> None:
        cores, lanes, sms, l2 = doc["machine"]
        self.machine_ = Machine(int(cores), int(lanes), int(sms), int(l2))
        self.family_ = doc["family"]
        self.t_ = doc["t"]
        self._index()


def _fit(a: np.ndarray, y: np.ndarray, iters: int) -> list[float]:
    return [float(c) for c in robust_rel_fit(a, y, iters)]


def _machine(rows: list[dict[str, Any]]) -> Machine:
    """Cores, SIMD lanes and SMs recorded in the samples' blocking columns."""

    # the blocking columns of the main conv kernel state the machine: cores/lanes, SMs
    main = {"cpu": "direct-nchwc", "gpu": "implicit-gemm"}

    def most(fam: str, col: str, default: int) -> int:
        vals = Counter(r[col] for r in rows if _family(r) == fam and r["algorithm"] == main[fam])
        return int(vals.most_common(1)[0][0]) if vals else default

    base = Machine()
    return Machine(
        cores=most("cpu", "cores", base.cores),
        lanes=most("cpu", "unit", base.lanes),
        sms=most("gpu", "cores", base.sms),
    )
