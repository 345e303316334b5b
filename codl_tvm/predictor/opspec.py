"""The operator description the predictor and the profiler share.

An :class:`OpSpec` is one NCHW, batch-1, float32 operator: conv2d (incl. grouped), depthwise
conv2d, dense, max/avg pooling or an elementwise op (bias add + ReLU). :meth:`OpSpec.part` gives
the sub-op one processor runs when the op is split along output rows (``H``) or output channels
(``OC``) with GPU share ``ratio``: the GPU takes the *first* ``split_count(n, ratio)`` rows or
channels, the CPU the rest (the convention of the partition pass).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

from codl_tvm.geometry import Window, split_count
from codl_tvm.tiling import ConvShape

COMPUTE_KINDS: tuple[str, ...] = (
    "conv2d",
    "depthwise",
    "dense",
    "pool_max",
    "pool_avg",
    "elementwise",
)
# a split's data sharing: copies between the processors, slice and concat kernels, 2-D copies
# within the GPU (block copies: passes.LowerSlicesToBlockCopies); one table for all layers
SHARING_OPS: tuple[str, ...] = ("to_cpu", "to_gpu", "slice", "concat", "copy_gpu")
SHARING_KINDS: tuple[str, ...] = (*SHARING_OPS, "sync")
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


def _derived(kind: str, H: int, W: int, IC: int, OC: int, KH: int, KW: int, SH: int, SW: int,
             pad: tuple[int, int, int, int], dilation: int, groups: int) -> dict[str, int]:
    """``out_h``, ``out_w``, ``out_elems`` and ``reduction`` of a (valid) op.

    Inline integer arithmetic of :meth:`Window.out_size`: building two ``Window`` objects per
    op cost more than the rest of a prediction.
    """
    if kind in WINDOW_KINDS:
        out_h = (H + pad[0] + pad[2] - dilation * (KH - 1) - 1) // SH + 1
        out_w = (W + pad[1] + pad[3] - dilation * (KW - 1) - 1) // SW + 1
    else:
        out_h, out_w = H, W
    reduction = _REDUCTION[kind](IC, groups, KH, KW)
    return {"out_h": out_h, "out_w": out_w, "out_elems": out_h * out_w * OC,
            "reduction": reduction}  # fmt: skip


# multiply-adds (or compares) per output element, per op kind: (IC, groups, KH, KW) -> int
_REDUCTION: dict[str, Callable[[int, int, int, int], int]] = {
    "conv2d": lambda ic, g, kh, kw: (ic // g) * kh * kw,
    "depthwise": lambda ic, g, kh, kw: (ic // g) * kh * kw,
    "dense": lambda ic, g, kh, kw: ic,
    "pool_max": lambda ic, g, kh, kw: kh * kw,
    "pool_avg": lambda ic, g, kh, kw: kh * kw,
    "elementwise": lambda ic, g, kh, kw: 2,
}
_FLOP_FACTOR = {"conv2d": 2, "depthwise": 2, "dense": 2}  # a multiply-add counts 2


@dataclass(frozen=True, init=False)
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

    Notes
    -----
    The predictor builds two sub-ops per prediction, so construction is kept cheap: the
    fields and the derived sizes (``out_h``, ``out_w``, ``out_elems``, ``reduction``) go
    straight into the instance ``__dict__`` (a frozen dataclass would set them one
    ``object.__setattr__`` at a time), and :meth:`part` builds its sub-ops from the parent's
    already validated numbers without validating again.
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

    def __init__(
        self,
        kind: str,
        H: int,
        W: int,
        IC: int,
        OC: int,
        KH: int = 1,
        KW: int = 1,
        SH: int = 1,
        SW: int = 1,
        pad: tuple[int, int, int, int] = (0, 0, 0, 0),
        dilation: int = 1,
        groups: int = 1,
    ) -> None:
        vals = {"kind": kind, "H": H, "W": W, "IC": IC, "OC": OC, "KH": KH, "KW": KW, "SH": SH,
                "SW": SW, "pad": pad, "dilation": dilation, "groups": groups}  # fmt: skip
        self.__dict__.update(vals)  # frozen: the dataclass's __setattr__ refuses
        self._validate()
        self.__dict__.update(_derived(**vals))
        if self.out_h < 1 or self.out_w < 1:
            raise ValueError(f"{self.kind}: empty output for {self}")

    def _validate(self) -> None:
        if self.kind not in COMPUTE_KINDS:
            raise ValueError(f"unknown op kind {self.kind!r}; known: {list(COMPUTE_KINDS)}")
        dims = (self.H, self.W, self.IC, self.OC, self.KH, self.KW, self.SH, self.SW)
        if min(dims) < 1 or self.dilation < 1 or self.groups < 1 or min(self.pad) < 0:
            raise ValueError(f"{self.kind}: sizes must be positive, got {self}")
        if self.IC % self.groups or self.OC % self.groups:
            raise ValueError(f"{self.kind}: groups {self.groups} must divide IC and OC")
        if self.kind in ("pool_max", "pool_avg", "elementwise") and self.IC != self.OC:
            raise ValueError(f"{self.kind}: IC ({self.IC}) must equal OC ({self.OC})")

    # ---- geometry -----------------------------------------------------------------------
    @property
    def window_h(self) -> Window:
        return Window(self.KH, self.SH, self.dilation, self.pad[0], self.pad[2])

    @property
    def window_w(self) -> Window:
        return Window(self.KW, self.SW, self.dilation, self.pad[1], self.pad[3])

    # out_h, out_w, out_elems and reduction are set by the constructors; these properties
    # only document them (an instance attribute shadows a cached_property)
    @cached_property
    def out_h(self) -> int:
        return self.window_h.out_size(self.H) if self.kind in WINDOW_KINDS else self.H

    @cached_property
    def out_w(self) -> int:
        return self.window_w.out_size(self.W) if self.kind in WINDOW_KINDS else self.W

    @cached_property
    def out_elems(self) -> int:
        return self.out_h * self.out_w * self.OC

    @cached_property
    def reduction(self) -> int:
        """Multiply-adds (or compares) per output element."""
        return _REDUCTION[self.kind](self.IC, self.groups, self.KH, self.KW)

    @property
    def in_bytes(self) -> int:
        return self.H * self.W * self.IC * BYTES_PER_ELEM

    @property
    def out_bytes(self) -> int:
        return self.out_elems * BYTES_PER_ELEM

    @property
    def flops(self) -> int:
        """Floating-point operations (a multiply-add counts 2)."""
        return _FLOP_FACTOR.get(self.kind, 1) * self.out_elems * self.reduction

    @property
    def conv_shape(self) -> ConvShape:
        """The light ``Conv2DInfo`` of this op as a batch-1 conv (the tile rules' input).

        Built on first use and kept (a hand-made memo: ``cached_property`` takes a lock).
        """
        d = self.__dict__
        c = d.get("_conv_shape")
        if c is None:
            dil = self.dilation
            c = d["_conv_shape"] = ConvShape(
                1, self.IC, self.OC, self.out_h, self.out_w, self.KH, self.KW,
                (self.SH, self.SW), (dil, dil), self.groups,
            )  # fmt: skip
        return c

    @property
    def memo(self) -> dict[Any, Any]:
        """This op's cache of values other modules derive from its sizes (an OpSpec never
        changes), keyed by those modules; not part of equality, hashing or JSON, and never
        inherited by :meth:`part`'s sub-ops."""
        d = self.__dict__
        m = d.get("_memo")
        if m is None:
            m = d["_memo"] = {}
        return m

    # ---- splitting ----------------------------------------------------------------------
    def units(self, dim: str) -> int:
        """Rows or channel units an op splits into along ``dim``."""
        self._check_dim(dim)
        if dim == "H":
            return self.out_h
        return self.groups if self.groups > 1 else self.OC

    def joins_in_place(self, dim: str) -> bool:
        """Whether the two parts of a ``dim`` split are contiguous blocks of the (batch-1,
        NCHW) output, which ``WriteSplitOutputsInPlace`` writes without a concat kernel:
        channel blocks, or row blocks of a one-channel output."""
        return dim == "OC" or self.OC == 1

    def part(self, role: str, dim: str, ratio: float) -> OpSpec | None:
        """The sub-op ``role`` ("gpu" or "cpu") runs; None when its share is empty."""
        total = self.units(dim)
        n_gpu = split_count(total, ratio)
        if role not in ("gpu", "cpu"):
            raise ValueError(f"unknown processor role {role!r}; expected 'gpu' or 'cpu'")
        return self._part(dim, *((0, n_gpu) if role == "gpu" else (n_gpu, total)))

    def parts(self, dim: str, ratio: float) -> dict[str, OpSpec | None]:
        """``{"cpu": part("cpu", ...), "gpu": part("gpu", ...)}``, splitting once."""
        total = self.units(dim)
        n_gpu = split_count(total, ratio)
        return {"cpu": self._part(dim, n_gpu, total), "gpu": self._part(dim, 0, n_gpu)}

    def _part(self, dim: str, lo: int, hi: int) -> OpSpec | None:
        """The sub-op of units ``[lo, hi)`` along ``dim`` (already checked), None if empty."""
        if hi <= lo:
            return None
        if dim == "OC":
            n = hi - lo
            if self.groups > 1:
                g = self.groups
                return self._channel_sub(n * (self.IC // g), n * (self.OC // g), n)
            if self.kind in ("pool_max", "pool_avg", "elementwise"):
                return self._channel_sub(n, n, 1)
            return self._channel_sub(self.IC, n, 1)
        if self.kind not in WINDOW_KINDS:
            return self._row_sub(hi - lo, self.pad, hi - lo)
        # geometry.row_part inlined: input rows [lo*S - pad_top, (hi-1)*S - pad_top + extent)
        pad = self.pad
        start = lo * self.SH - pad[0]
        end = (hi - 1) * self.SH - pad[0] + self.dilation * (self.KH - 1) + 1
        src_lo, src_hi = max(0, start), min(self.H, end)
        sub_pad = (src_lo - start, pad[1], end - src_hi, pad[3])
        h = src_hi - src_lo
        if h < 1:  # rows all in padding: the checked constructor says so
            return replace(self, H=h, pad=sub_pad)
        out_h = (h + sub_pad[0] + sub_pad[2] - self.dilation * (self.KH - 1) - 1) // self.SH + 1
        return self._row_sub(h, sub_pad, out_h)

    # A part of a valid op is valid by construction: the two builders below copy the parent's
    # fields and derived sizes (one dict copy), change what the split changes and drop the
    # values cached on first use (conv_shape, memo), which belong to the parent's sizes.
    def _copy(self) -> tuple[OpSpec, dict[str, Any]]:
        new = object.__new__(type(self))
        nd = new.__dict__
        nd.update(self.__dict__)
        for name in _LAZY:
            nd.pop(name, None)
        return new, nd

    def _channel_sub(self, ic: int, oc: int, groups: int) -> OpSpec:
        new, nd = self._copy()
        nd["IC"], nd["OC"], nd["groups"] = ic, oc, groups
        nd["out_elems"] = nd["out_h"] * nd["out_w"] * oc
        nd["reduction"] = _REDUCTION[nd["kind"]](ic, groups, nd["KH"], nd["KW"])
        return new

    def _row_sub(self, h: int, pad: tuple[int, int, int, int], out_h: int) -> OpSpec:
        new, nd = self._copy()
        nd["H"], nd["pad"], nd["out_h"] = h, pad, out_h
        nd["out_elems"] = out_h * nd["out_w"] * nd["OC"]
        return new

    def _check_dim(self, dim: str) -> None:
        if dim not in SPLIT_DIMS[self.kind]:
            raise ValueError(
                f"{self.kind} cannot be split on {dim!r}; "
                f"it splits on {list(SPLIT_DIMS[self.kind])}"
            )

    # ---- (de)serialisation --------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        doc = {f: getattr(self, f) for f in _FIELD_NAMES}
        doc["pad"] = list(self.pad)
        return doc

    @staticmethod
    def from_json(doc: dict[str, Any]) -> OpSpec:
        doc = dict(doc)
        doc["pad"] = tuple(int(p) for p in doc.get("pad", (0, 0, 0, 0)))
        return OpSpec(**doc)


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(OpSpec))
# what an OpSpec caches on first use (conv_shape, memo): a part must not inherit its parent's
_LAZY = ("_conv_shape", "_memo")


def conv_kind(ic: int, oc: int, groups: int) -> str:
    """``depthwise`` for a conv with one input and one output channel per group."""
    return "depthwise" if groups > 1 and groups == ic == oc else "conv2d"


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TensorFlow SAME padding (before, after): output = ceil(size / stride)."""
    out = -(-size // stride)
    extent = dilation * (kernel - 1) + 1
    total = max(0, (out - 1) * stride + extent - size)
    return total // 2, total - total // 2
