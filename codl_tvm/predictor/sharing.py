"""Data-sharing cost model (CoDL Eq. 2, section 5.1): copies linear in bytes, sync a constant.

Every ``to_vdevice`` is a synchronisation plus a copy, ``a + b * bytes`` per direction. The
intercept ``a`` is learned per direction rather than set to the measured sync: on the H100
machine a host-to-GPU copy of a few KB costs ~24 us against a 10 us sync (pageable staging),
and pinning it to the sync underpredicted every small transfer by 2x, which moved tiny ops to
the CPU at a loss (tiny-cnn). The fit is non-negative and robust (least absolute
relative error), so one stalled large copy does not bend the line. Slicing and concatenation
on either processor cost ``a + b * bytes`` of the bytes they write; so does a block of rows
copied within the GPU (``copy_gpu``, a 2-D copy on its copy engines where the runtime lowers a
split's slices and concat to copies). A predictor profiled before ``copy_gpu`` existed prices
it as the GPU slice kernel it replaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from codl_tvm.predictor.fitting import robust_rel_fit
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.predictor.split_sharing import SplitUnit, price_split

TRANSFERS = ("to_cpu", "to_gpu")
LINEAR = (*TRANSFERS, "copy_gpu")  # fitted robustly, one line per op (no role)
COPIES = ("slice", "concat")


def _rel_lstsq(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares on relative error: minimise sum(((a @ c) - y) / y) ** 2."""
    coef, *_ = np.linalg.lstsq(a / y[:, None], np.ones_like(y), rcond=None)
    return coef


class SharingModel:
    """Learned sharing costs of one device pair (fit on the sharing rows of a samples file)."""

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        self.params = params or {}

    def fit(self, rows: Sequence[dict[str, Any]]) -> SharingModel:
        sync = [r["latency_us"] for r in rows if r["op"] == "sync"]
        params: dict[str, Any] = {"sync_us": float(np.median(sync)) if sync else 0.0}
        for op in LINEAR:
            mine = [r for r in rows if r["op"] == op]
            if mine:
                a = np.array([[1.0, r["bytes"]] for r in mine], dtype=float)
                y = np.array([r["latency_us"] for r in mine], dtype=float)
                params[op] = [float(v) for v in robust_rel_fit(a, y)]
        for op in COPIES:
            for role in ("gpu", "cpu"):
                mine = [r for r in rows if r["op"] == op and r["role"] == role]
                if mine:
                    a = np.array([[1.0, r["bytes"]] for r in mine])
                    y = np.array([r["latency_us"] for r in mine])
                    params[f"{op}_{role}"] = [float(v) for v in _rel_lstsq(a, y)]
        self.params = params
        return self

    def cost(self, op: str, role: str, nbytes: float) -> float:
        key = op if op in LINEAR or op == "sync" else f"{op}_{role}"
        if key == "sync":
            return self.params.get("sync_us", 0.0)
        if key == "copy_gpu" and key not in self.params and "slice_gpu" in self.params:
            key = "slice_gpu"  # profiled before block copies: the kernel they replace
        if key not in self.params:
            raise ValueError(
                f"the predictor has no sharing samples for {key!r}; profile without --no-sharing"
            )
        a, b = self.params[key]
        return max(a + b * nbytes, 0.0)

    def op_cost(
        self,
        spec: OpSpec,
        dim: str,
        ratio: float,
        chain: bool,
        parts: dict[str, OpSpec | None] | None = None,
    ) -> float:
        """Sharing cost of one op split at ``ratio`` (0 inside a chain or on the GPU alone):
        the planner's price of a split (:func:`~codl_tvm.predictor.split_sharing.price_split`),
        all of it serial.

        ``parts``: the ``{"cpu": ..., "gpu": ...}`` sub-ops when the caller has them already.
        """
        if chain:
            return 0.0
        parts = parts or {r: spec.part(r, dim, ratio) for r in ("cpu", "gpu")}
        unit = SplitUnit(spec, spec, dim, ratio, {r: [p] for r, p in parts.items()})
        shared = price_split(self.cost, unit)
        return shared.pre_us + shared.post_us

    def to_json(self) -> dict[str, Any]:
        return {k: _round(v) for k, v in self.params.items()}


def _round(v: Any) -> Any:
    if isinstance(v, list):
        return [_round(x) for x in v]
    return float(f"{v:.5g}")
