"""Seeded source tensors of ``benchmarks/anchors.py``, and the recipes that find every tensor
an engine reads as a view of one of them (see ``anchors_models``)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

MIN_SIZE = 256  # float tensors with at least this many elements are drawn on the target
LITERAL_MAX = 1 << 20  # bytes: a larger tensor that is no view of a source is not carried


# ---- source tensors: drawn from a seed, found again in every engine's tensors -------------
def spec_of(name: str, a: np.ndarray) -> dict[str, Any]:
    """How to draw a tensor like ``a``: shape, mean, std (constant tensors get some spread)."""
    mean, std = float(a.mean()), float(a.std())
    return {"name": name, "shape": list(a.shape), "mean": mean,
            "std": std if std > 1e-8 else 0.05 * max(abs(mean), 1.0)}


def draw(specs: list[dict[str, Any]], seed: int) -> dict[str, np.ndarray]:
    """The source tensors: mean + std * N(0, 1), one generator per tensor."""
    out = {}
    for i, s in enumerate(specs):
        z = np.random.default_rng([seed, i]).standard_normal(s["shape"], dtype=np.float32)
        out[s["name"]] = (np.float32(s["mean"]) + np.float32(s["std"]) * z).astype(np.float32)
    return out


class ValueIndex:
    """Find tensors as strided views of the source tensors, by their (random) values."""

    def __init__(self, sources: dict[str, np.ndarray]):
        self.names = list(sources)
        self.sizes = np.array([sources[n].size for n in self.names], np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self.flat = np.concatenate([sources[n].ravel() for n in self.names]) if sources \
            else np.zeros(0, np.float32)
        self.order = np.argsort(self.flat, kind="stable")
        self.sorted = self.flat[self.order]

    def _where(self, value: float, limit: int = 16) -> np.ndarray:
        lo = np.searchsorted(self.sorted, value, side="left")
        hi = np.searchsorted(self.sorted, value, side="right")
        return self.order[lo:min(hi, lo + limit)]

    def find(self, a: np.ndarray) -> dict[str, Any] | None:
        """``{"src", "offset", "strides", "shape"}`` with ``a == view(src)``, or None."""
        if a.dtype != np.float32 or a.size < 2 or not self.flat.size:
            return None
        a = np.ascontiguousarray(a)
        for o in self._where(a.flat[0]):
            k = int(np.searchsorted(self.starts, o, side="right") - 1)
            base, size = int(self.starts[k]), int(self.sizes[k])
            strides = [self._stride(a, ax, int(o), base, size) for ax in range(a.ndim)]
            if None in strides:
                continue
            rec = {"src": self.names[k], "offset": int(o) - base, "strides": strides,
                   "shape": list(a.shape)}
            idx = _indices(rec)
            if idx.min() >= 0 and idx.max() < size and np.array_equal(
                    self.flat[base + idx], a.ravel()):
                return rec
        return None

    def _stride(self, a: np.ndarray, ax: int, o: int, base: int, size: int) -> int | None:
        n = a.shape[ax]
        if n == 1:
            return 0
        line = a[tuple(slice(None) if i == ax else 0 for i in range(a.ndim))]
        for q in self._where(line[1]):
            s = int(q) - o
            end = o + s * (n - 1)
            if base <= q < base + size and base <= end < base + size and np.array_equal(
                    self.flat[o + s * np.arange(n)], line):
                return s
        return None


def _indices(rec: dict[str, Any]) -> np.ndarray:
    idx = np.full(rec["shape"], rec["offset"], np.int64)
    for ax, (n, s) in enumerate(zip(rec["shape"], rec["strides"])):
        shape = [1] * len(rec["shape"])
        shape[ax] = n
        idx = idx + s * np.arange(n, dtype=np.int64).reshape(shape)
    return idx.ravel()


def literal(literals: dict[str, np.ndarray], a: np.ndarray) -> str:
    """Add ``a`` to ``literals`` under a key of its content (shared by every engine)."""
    key = hashlib.sha1(a.tobytes() + str((a.shape, a.dtype)).encode()).hexdigest()[:20]
    literals[key] = a
    return key


def recipes(tensors: dict[str, np.ndarray], index: ValueIndex, literals: dict[str, np.ndarray],
            literal_max: int = LITERAL_MAX) -> tuple[dict[str, Any], list[str]]:
    """Each tensor as a view recipe, or a literal (added to ``literals``); also the names of
    large tensors that are neither (drawn at random on the target: outputs then differ)."""
    out, missing = {}, []
    for name, a in tensors.items():
        a = np.asarray(a)
        rec = index.find(a)
        if rec is None:
            rec = concat_recipe(a, index)
        if rec is None and a.nbytes > literal_max:
            missing.append(name)
            rec = {"random": list(a.shape), "dtype": str(a.dtype)}
        elif rec is None:
            rec = {"literal": literal(literals, a)}
        out[name] = rec
    return out, missing


def concat_recipe(a: np.ndarray, index: ValueIndex, max_parts: int = 4) -> dict | None:
    """``{"concat": [view recipes], "axis": -1}`` where ``a`` is 2 to ``max_parts`` equal views
    side by side along its last axis (codl-tvm's combined Q, K, V projection), or None."""
    if a.ndim == 0 or a.dtype != np.float32:
        return None
    n = a.shape[-1]
    for parts in range(2, min(max_parts, n) + 1):
        if n % parts:
            continue
        recs = [index.find(p) for p in np.split(a, parts, axis=-1)]
        if all(r is not None for r in recs):
            return {"concat": recs, "axis": -1}
    return None


def realize(recs: dict[str, Any], sources: dict[str, np.ndarray],
            literals: Any) -> dict[str, np.ndarray]:
    """The tensors of :func:`recipes` from the source tensors drawn here."""
    out = {}
    for name, rec in recs.items():
        if "concat" in rec:
            parts = realize(dict(enumerate(rec["concat"])), sources, literals)
            out[name] = np.concatenate([parts[i] for i in range(len(parts))], axis=rec["axis"])
        elif "literal" in rec:
            out[name] = literals[rec["literal"]]
        elif "random" in rec:
            out[name] = (0.05 * np.random.default_rng(0).standard_normal(rec["random"])
                         ).astype(rec["dtype"])
        else:
            src = sources[rec["src"]].ravel()
            n = int(np.prod(rec["shape"]))
            dense = list(np.cumprod([1, *rec["shape"][::-1]])[:-1][::-1])
            if all(s == d for s, d, k in zip(rec["strides"], dense, rec["shape"]) if k > 1):
                out[name] = src[rec["offset"]:rec["offset"] + n].reshape(rec["shape"])
            else:
                out[name] = src[_indices(rec)].reshape(rec["shape"])
    return out
