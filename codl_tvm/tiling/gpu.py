"""GPU tile rules: the tiled implicit GEMM's tile tables, split-K, shared-memory padding, GPU
Winograd's grids, the global-pool threshold."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator

from . import variants as _variants
from .common import Conv
from .cpu import winograd_applies, winograd_grid


# ---- GPU tiled implicit GEMM ------------------------------------------------------------
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


SMEM_BANKS = 32  # 4-byte shared-memory banks (CUDA since sm_50; other GPUs' local memory differs)


def wt_row_pad(t: Tile) -> int:
    """Row stride of the shared ``[bk][bm]`` weight tile, mod :data:`SMEM_BANKS`.

    Its warp stores go down a column (lanes along K, for coalesced OIHW reads): unpadded rows
    put a whole column in one bank (16-way conflicts for bk 16). The pad is ``tm``, not 1, so
    every row stays aligned for the ``tm``-float vector reads of the register tile (an
    unaligned 8-float read made TVM's CUDA codegen emit a ``make_ulonglong4`` of 8 floats,
    which nvcc rejects)."""
    return t.tm


def wt_row_stride(t: Tile) -> int:
    """Floats between two rows of the shared weight tile (TVM's ``storage_align`` rule)."""
    return t.bm + (SMEM_BANKS + wt_row_pad(t) - t.bm % SMEM_BANKS) % SMEM_BANKS


class TiledGemm:
    """Tile counts of an ``m x n`` GEMM cut by ``tile`` (mixed into the GPU kernels' plans)."""

    tile: Tile
    m: int
    n: int

    @property
    def m_tiles(self) -> int:
        return math.ceil(self.m / self.tile.bm)

    @property
    def n_tiles(self) -> int:
        return math.ceil(self.n / self.tile.bn)


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

# Streaming multiprocessors / compute units per target arch; split-K aims at MIN_WAVES waves.
SMS = {"sm_90": 132, "sm_80": 108, "sm_86": 84, "sm_89": 128, "opencl": 4}
DEFAULT_SMS = 80
MIN_WAVES = 2
MAX_SPLIT = 16
MIN_K_PER_SPLIT = 256  # below this a split's blocks spend more on loads than on FMAs
SUM_THREADS = 128  # threads per block of split-K's second (sum) pass

@contextlib.contextmanager
def use_variant(name: str) -> Iterator[None]:
    """Schedule with the tile table ``name`` (or ``"dlight"``) inside the ``with`` block (the
    ``gpu_conv`` of :class:`~codl_tvm.tiling.variants.KernelVariants`)."""
    if name not in VARIANTS and name != DECLINE:
        raise ValueError(f"unknown GPU conv variant {name!r}; known: {variant_names()}")
    with _variants.use_variants(gpu_conv=name):
        yield


def variant_names() -> list[str]:
    """Every selectable variant, ``"dlight"`` included."""
    return [*VARIANTS, DECLINE]


def current_variant() -> str:
    """The tile table the schedules use now (``KernelVariants.gpu_conv``)."""
    return _variants.current_variants().gpu_conv


def sm_count(arch: str, kind: str) -> int:
    """SMs (compute units) of a GPU target ``arch`` / target kind."""
    return SMS.get(arch, SMS.get(kind, DEFAULT_SMS))


def matches(row: ShapeClass, m: int, n: int, k: int) -> bool:
    return (
        (row.max_oc is None or m <= row.max_oc)
        and (row.min_k is None or k >= row.min_k)
        and (row.min_oc is None or m >= row.min_oc)
        and (row.max_pixels is None or n <= row.max_pixels)
    )


def shape_class(m: int, n: int, k: int, variant: str) -> ShapeClass:
    """First row of table ``variant`` matching GEMM sizes ``m`` (OC), ``n`` (pixels), ``k``."""
    for r in VARIANTS[variant]:  # a loop, not next() on a generator: on every prediction
        if matches(r, m, n, k):
            return r
    raise StopIteration  # as next() on the rows did: every table ends with a catch-all row


def split_k(row: ShapeClass, m: int, n: int, k: int, sms: int) -> tuple[int, int]:
    """(S, padded K per partition) of split-K for ``row``'s tile on ``sms`` SMs."""
    tiles = math.ceil(m / row.tile.bm) * math.ceil(n / row.tile.bn)
    split = 1
    if row.split_k:
        want = math.ceil(MIN_WAVES * sms / tiles)
        split = max(1, min(want, MAX_SPLIT, k // MIN_K_PER_SPLIT))
    k_split = math.ceil(k / (split * row.tile.bk)) * row.tile.bk
    return math.ceil(k / k_split), k_split  # drop partitions that would be all padding


# ---- GPU Winograd F(2x2, 3x3) -----------------------------------------------------------
GPU_WINOGRAD_MIN_IC = 32  # H100: 1.02-2.35x over the tiled conv on all 26 workload shapes with
#                          IC >= 32, 0.28-0.32x on the three with IC = 3
WINOGRAD_TRANSFORM_THREADS = 128  # threads per block of the transform kernels (memory-bound)
# grid keys of the input (v), weight (u) and output (y) transforms (spelled out once: the
# predictor's mirror asks for this grid on every prediction)
_TRANSFORM_KEYS = (
    ("v.blockIdx.x", "v.threadIdx.x"),
    ("u.blockIdx.x", "u.threadIdx.x"),
    ("y.blockIdx.x", "y.threadIdx.x"),
)


def gpu_winograd_enabled() -> bool:
    """Whether the schedules use the rule now (``KernelVariants.gpu_winograd``; on by
    default)."""
    return _variants.current_variants().gpu_winograd


def gpu_winograd_wins(c: Conv, min_ic: int = GPU_WINOGRAD_MIN_IC, enabled: bool | None = None
                      ) -> bool:
    """Shape and switch part of ``gpu_winograd.wins`` (the dtype is the caller's check);
    ``enabled``: the switch (the predictor passes its own), None: the schedules' current one."""
    if not (winograd_applies(c) and c.ic >= min_ic):
        return False
    return gpu_winograd_enabled() if enabled is None else enabled


def gpu_winograd_gemm(c: Conv) -> tuple[ShapeClass, int, int]:
    """(shape class, tile rows, tile columns) of the 16 batched GEMMs: M = OC, N = 2x2 tiles
    of the whole batch, K = IC, from the default tile table (the variant does not apply)."""
    th, tw = winograd_grid(c)
    return shape_class(c.oc, c.n * th * tw, c.ic, DEFAULT_VARIANT), th, tw


def gpu_winograd_grid(c: Conv, tile: Tile, th: int, tw: int) -> dict[str, int]:
    """Launch grid of the batched GEMM (``blockIdx.z`` = the 16 transform positions) and, under
    ``v.``/``u.``/``y.``, of the input, weight and output transforms."""
    n = c.n * th * tw
    grid = {"blockIdx.x": math.ceil(n / tile.bn), "blockIdx.y": math.ceil(c.oc / tile.bm),
            "blockIdx.z": 16, "threadIdx.x": tile.tx, "threadIdx.y": tile.ty}  # fmt: skip
    for (bx, tx), items in zip(_TRANSFORM_KEYS, (c.ic * n, c.ic * c.oc, c.oc * n), strict=True):
        grid[bx] = math.ceil(items / WINOGRAD_TRANSFORM_THREADS)
        grid[tx] = WINOGRAD_TRANSFORM_THREADS
    return grid

# GPU pools with a 1x1 output and at least this many window elements get DLight Reduction (one
# block per output) instead of one thread per output: a warp's worth, below which a thread per
# output loses little
GLOBAL_POOL_MIN_WINDOW = 32
