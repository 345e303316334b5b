"""Duck types of the tile rules: what they read of a conv and of a CPU."""

from __future__ import annotations

from typing import NamedTuple, Protocol


class Conv(Protocol):
    """What the tile choices read of a conv (``Conv2DInfo`` has it)."""

    n: int
    ic: int
    oc: int
    oh: int
    ow: int
    kh: int
    kw: int
    stride: tuple[int, int]
    dilation: tuple[int, int]

    @property
    def groups(self) -> int: ...


class Simd(Protocol):
    """SIMD facts of a CPU (``TargetInfo`` has them)."""

    lanes: int
    vector_regs: int
    cores: int


class ConvShape(NamedTuple):
    """A light ``Conv2DInfo``: the conv geometry the tile choices need (a tuple: the
    predictor builds several per prediction)."""

    n: int
    ic: int
    oc: int
    oh: int
    ow: int
    kh: int
    kw: int
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
