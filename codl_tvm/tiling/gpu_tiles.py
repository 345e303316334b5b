"""The GPU conv's tile tables as data: the thread-block tiles and, per selectable variant,
the shape classes that pick them (first matching row wins). No other tiling module is imported
here, so :mod:`.variants` can check a variant name without importing :mod:`.gpu`."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tile:
    """Thread-block tile ``(ty*tm) x (tx*tn) x bk``; ``tm x tn`` outputs per thread."""

    ty: int  # threads along M (output channels)
    tm: int  # register rows per thread
    tx: int  # threads along N (output pixels)
    tn: int  # register columns per thread
    bk: int  # K step staged in shared memory per iteration

    @property
    def bm(self) -> int:
        return self.ty * self.tm

    @property
    def bn(self) -> int:
        return self.tx * self.tn

    @property
    def threads(self) -> int:
        return self.ty * self.tx


@dataclasses.dataclass(frozen=True)
class ShapeClass:
    """A row of a variant table: the first row whose bounds all hold picks ``tile``."""

    name: str
    tile: Tile
    max_oc: int | None = None
    max_pixels: int | None = None
    min_oc: int | None = None
    min_k: int | None = None  # reduction length IC*KH*KW
    split_k: bool = True  # allow split-K when the grid is short of MIN_WAVES waves


BIG = Tile(ty=16, tm=8, tx=16, tn=4, bk=8)  # 128 x 64, 32 accumulators per thread
MID = Tile(ty=16, tm=4, tx=16, tn=4, bk=16)  # 64 x 64
TINY_N = Tile(ty=16, tm=4, tx=8, tn=4, bk=16)  # 64 x 32: few pixels, many channels
NARROW_OC = Tile(ty=8, tm=4, tx=32, tn=4, bk=8)  # 32 x 128
THIN_OC = Tile(ty=2, tm=2, tx=64, tn=4, bk=8)  # 4 x 256: OC of 1-4 (RGB outputs)

VARIANTS: dict[str, tuple[ShapeClass, ...]] = {
    # Chosen from the H100 sweep of all variants over the 44 workload convs (KERNELS.md):
    # the 128x64 tile with split-K wins wherever K > 1024 and OC >= 128 (up to 2.3x over
    # 64x64 on YOLO's 13x13 layers); 64x64 wins for OC >= 256 with a short K.
    "tiled": (
        ShapeClass("thin-oc", THIN_OC, max_oc=4),
        ShapeClass("narrow-oc", NARROW_OC, max_oc=32),
        ShapeClass("deep-k", BIG, min_oc=128, min_k=1025),
        ShapeClass("wide-oc", MID, min_oc=256),
        ShapeClass("tiny-n", TINY_N, max_pixels=1024),
        ShapeClass("mid-n", MID, max_pixels=8192),
        ShapeClass("big", BIG, min_oc=128),
        ShapeClass("big-n", MID),
    ),
    "tiled-v1": (  # the first table, before the sweep
        ShapeClass("thin-oc", THIN_OC, max_oc=4),
        ShapeClass("narrow-oc", NARROW_OC, max_oc=32),
        ShapeClass("tiny-n", TINY_N, max_pixels=1024),
        ShapeClass("mid-n", MID, max_pixels=8192),
        ShapeClass("big", BIG, min_oc=128),
        ShapeClass("big-n", MID),
    ),
    "tiled-64": (
        ShapeClass("thin-oc", THIN_OC, max_oc=4),
        ShapeClass("narrow-oc", NARROW_OC, max_oc=32),
        ShapeClass("any", MID),
    ),
    "tiled-128": (
        ShapeClass("thin-oc", THIN_OC, max_oc=4),
        ShapeClass("narrow-oc", NARROW_OC, max_oc=32),
        ShapeClass("any", BIG),
    ),
    "tiled-nosplitk": (
        ShapeClass("thin-oc", THIN_OC, max_oc=4, split_k=False),
        ShapeClass("narrow-oc", NARROW_OC, max_oc=32, split_k=False),
        ShapeClass("tiny-n", TINY_N, max_pixels=1024, split_k=False),
        ShapeClass("mid-n", MID, max_pixels=8192, split_k=False),
        ShapeClass("big", BIG, min_oc=128, split_k=False),
        ShapeClass("big-n", MID, split_k=False),
    ),
}
DEFAULT_VARIANT = "tiled"
DECLINE = "dlight"  # variant name under which the tiled rule steps aside for DLight's Matmul


def variant_names() -> list[str]:
    """Every selectable variant, ``"dlight"`` included."""
    return [*VARIANTS, DECLINE]
