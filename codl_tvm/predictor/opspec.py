"""The operator description the predictor and the profiler share.

An :class:`OpSpec` is one NCHW, batch-1, float32 operator: conv2d (incl. grouped), depthwise
conv2d, dense, max/avg pooling or an elementwise op (bias add + ReLU). :meth:`OpSpec.part` gives
the sub-op one processor runs when the op is split along output rows (``H``) or output channels
(``OC``) with GPU share ``ratio``: the GPU takes the *first* ``split_count(n, ratio)`` rows or
channels, the CPU the rest (the convention of the partition pass).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import cached_property
from typing import Any

from codl_tvm.geometry import Window, row_part, split_count

COMPUTE_KINDS: tuple[str, ...] = (
    "conv2d",
    "depthwise",
    "dense",
    "pool_max",
    "pool_avg",
    "elementwise",
)
SHARING_KINDS: tuple[str, ...] = ("to_cpu", "to_gpu", "slice", "concat", "sync")
DIMS: tuple[str, ...] = ("H", "OC")
# dims each op kind can be split on (dense has one output row at batch 1)
SPLIT_DIMS: dict[str, tuple[str, ...]] = {
    "conv2d": ("H", "OC"),
    "depthwise": ("H", "OC"),
    "dense": ("OC",),
    "pool_max": ("H", "OC"),
    "pool_avg": ("H", "OC"),
    "elementwise": ("H", "OC"),
}
WINDOW_KINDS = frozenset({"conv2d", "depthwise", "pool_max", "pool_avg"})
BYTES_PER_ELEM = 4  # float32


@dataclass(frozen=True)
class OpSpec:
    """One operator (batch 1, NCHW, float32).

    Parameters
    ----------
    kind : str
        One of :data:`COMPUTE_KINDS`.
    H, W : int
        Input height and width (1 for dense).
    IC, OC : int
        Input and output channels (dense: in and out features; pool/elementwise: IC == OC).
    KH, KW, SH, SW : int
        Kernel and stride (1 for dense and elementwise).
    pad : tuple of int
        Zero padding ``(top, left, bottom, right)``.
    dilation : int
        Dilation of both axes.
    groups : int
        Convolution groups (``IC == OC == groups`` for depthwise).
    """

    kind: str
    H: int
    W: int
    IC: int
    OC: int
    KH: int = 1
    KW: int = 1
    SH: int = 1
    SW: int = 1
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: int = 1
    groups: int = 1

    def __post_init__(self) -> None:
        if self.kind not in COMPUTE_KINDS:
            raise ValueError(f"unknown op kind {self.kind!r}; known: {list(COMPUTE_KINDS)}")
        dims = (self.H, self.W, self.IC, self.OC, self.KH, self.KW, self.SH, self.SW)
        if min(dims) < 1 or self.dilation < 1 or self.groups < 1 or min(self.pad) < 0:
            raise ValueError(f"{self.kind}: sizes must be positive, got {self}")
        if self.IC % self.groups or self.OC % self.groups:
            raise ValueError(f"{self.kind}: groups {self.groups} must divide IC and OC")
        if self.kind in ("pool_max", "pool_avg", "elementwise") and self.IC != self.OC:
            raise ValueError(f"{self.kind}: IC ({self.IC}) must equal OC ({self.OC})")
        if self.out_h < 1 or self.out_w < 1:
            raise ValueError(f"{self.kind}: empty output for {self}")

    # ---- geometry -----------------------------------------------------------------------
    @property
    def window_h(self) -> Window:
        return Window(self.KH, self.SH, self.dilation, self.pad[0], self.pad[2])

    @property
    def window_w(self) -> Window:
        return Window(self.KW, self.SW, self.dilation, self.pad[1], self.pad[3])

    @cached_property  # the predictor asks many times per op
    def out_h(self) -> int:
        return self.window_h.out_size(self.H) if self.kind in WINDOW_KINDS else self.H

    @cached_property  # the predictor asks many times per op
    def out_w(self) -> int:
        return self.window_w.out_size(self.W) if self.kind in WINDOW_KINDS else self.W

    @cached_property  # the predictor asks many times per op
    def out_elems(self) -> int:
        return self.out_h * self.out_w * self.OC

    @property
    def in_bytes(self) -> int:
        return self.H * self.W * self.IC * BYTES_PER_ELEM

    @property
    def out_bytes(self) -> int:
        return self.out_elems * BYTES_PER_ELEM

    @cached_property  # the predictor asks many times per op
    def reduction(self) -> int:
        """Multiply-adds (or compares) per output element."""
        if self.kind in ("conv2d", "depthwise"):
            return (self.IC // self.groups) * self.KH * self.KW
        if self.kind == "dense":
            return self.IC
        if self.kind in ("pool_max", "pool_avg"):
            return self.KH * self.KW
        return 2

    @property
    def flops(self) -> int:
        """Floating-point operations (a multiply-add counts 2)."""
        factor = 2 if self.kind in ("conv2d", "depthwise", "dense") else 1
        return factor * self.out_elems * self.reduction

    # ---- splitting ----------------------------------------------------------------------
    def units(self, dim: str) -> int:
        """Rows or channel units an op splits into along ``dim``."""
        self._check_dim(dim)
        if dim == "H":
            return self.out_h
        return self.groups if self.groups > 1 else self.OC

    def part(self, role: str, dim: str, ratio: float) -> OpSpec | None:
        """The sub-op ``role`` ("gpu" or "cpu") runs; None when its share is empty."""
        total = self.units(dim)
        n_gpu = split_count(total, ratio)
        lo, hi = (0, n_gpu) if role == "gpu" else (n_gpu, total)
        if role not in ("gpu", "cpu"):
            raise ValueError(f"unknown processor role {role!r}; expected 'gpu' or 'cpu'")
        if hi <= lo:
            return None
        if dim == "OC":
            return self._channel_part(hi - lo)
        if self.kind not in WINDOW_KINDS:
            return replace(self, H=hi - lo)
        rp = row_part(self.window_h, self.H, lo, hi)
        pad = (rp.pad[0], self.pad[1], rp.pad[1], self.pad[3])
        return replace(self, H=rp.src[1] - rp.src[0], pad=pad)

    def _channel_part(self, n: int) -> OpSpec:
        if self.groups > 1:
            g = self.groups
            return replace(self, IC=n * (self.IC // g), OC=n * (self.OC // g), groups=n)
        if self.kind in ("pool_max", "pool_avg", "elementwise"):
            return replace(self, IC=n, OC=n)
        return replace(self, OC=n)

    def _check_dim(self, dim: str) -> None:
        if dim not in SPLIT_DIMS[self.kind]:
            raise ValueError(
                f"{self.kind} cannot be split on {dim!r}; "
                f"it splits on {list(SPLIT_DIMS[self.kind])}"
            )

    # ---- (de)serialisation --------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["pad"] = list(self.pad)
        return doc

    @staticmethod
    def from_json(doc: dict[str, Any]) -> OpSpec:
        doc = dict(doc)
        doc["pad"] = tuple(int(p) for p in doc.get("pad", (0, 0, 0, 0)))
        return OpSpec(**doc)


def conv_kind(ic: int, oc: int, groups: int) -> str:
    """``depthwise`` for a conv with one input and one output channel per group."""
    return "depthwise" if groups > 1 and groups == ic == oc else "conv2d"


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TensorFlow SAME padding (before, after): output = ceil(size / stride)."""
    out = -(-size // stride)
    extent = dilation * (kernel - 1) + 1
    total = max(0, (out - 1) * stride + extent - size)
    return total // 2, total - total // 2
