"""Tile choices of codl-tvm's conv kernels from shapes alone (imports no TVM).

The schedules (``schedules/cpu_gemm.py``, ``cpu_winograd.py``, ``gpu_conv.py``) and the
latency predictor's mirror of them (``predictor/blocking.py``) both call these, so the
predictor computes the blocking of the kernel that will really run without building its IR
(and without TVM's compiler: it must load with ``TVM_USE_RUNTIME_LIB=1``). Arguments are
duck-typed: the schedules pass ``Conv2DInfo``/``TargetInfo``, the predictor :class:`ConvShape`
and its ``Machine``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Iterator
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


# ---- CPU direct NCHWc (mirror of cpu_conv.conv_tiles; a test keeps the two equal) ---------
def direct_tiles(c: Conv, t: Simd) -> tuple[int, int]:
    """(ocb, x_tile): channels per SIMD block and output columns per register tile."""
    vecs = 2 if c.oc > t.lanes else 1
    budget = (t.vector_regs - vecs - 2) // vecs
    return t.lanes * vecs, max(1, min(budget, 14, c.ow))


def direct_tasks(c: Conv, t: Simd) -> int:
    ocb, xt = direct_tiles(c, t)
    return math.ceil(c.oc / ocb) * c.n * c.oh * math.ceil(c.ow / xt)


# ---- CPU 1x1 GEMM ---------------------------------------------------------------------
DIRECT_WASTE = 1.10  # direct kernel's computed / useful columns above which the GEMM wins
MAX_VECS = 3  # pixel vectors per register tile; more only adds tail waste on small images


def gemm_applies(c: Conv) -> bool:
    """1x1, stride 1, groups 1 (dilation irrelevant)."""
    return (c.kh, c.kw, tuple(c.stride), c.groups) == (1, 1, (1, 1), 1)


def gemm_wins(c: Conv, t: Simd) -> bool:
    """Shape part of ``cpu_gemm.wins`` (see there for the measurements behind it)."""
    if not gemm_applies(c):
        return False
    ocb, xt = direct_tiles(c, t)
    col_waste = math.ceil(c.ow / xt) * xt / c.ow
    return c.oc % ocb != 0 or col_waste >= DIRECT_WASTE or c.ow <= xt


def gemm_tiles(c: Conv, t: Simd) -> tuple[int, int]:
    """(mr, nv): OC rows and pixel SIMD vectors of the register tile."""
    pixels = c.n * c.oh * c.ow
    nv = max(1, min(MAX_VECS, math.ceil(pixels / t.lanes)))
    budget = max(1, (t.vector_regs - nv - 2) // nv)
    # the mr that pads OC least, the largest on a tie: min over (padded OC, -mr), as a loop
    # (the predictor runs this on every prediction; a key function costs a call per row)
    mr, least = 0, None
    for m in range(min(budget, c.oc), 0, -1):
        padded = math.ceil(c.oc / m) * m
        if least is None or padded < least:
            mr, least = m, padded
    if least is None:
        raise ValueError(f"no register tile for OC {c.oc}")
    return mr, nv


def gemm_tasks(c: Conv, t: Simd) -> int:
    """Parallel (pixel tile, OC block) tasks."""
    mr, nv = gemm_tiles(c, t)
    return c.n * math.ceil(c.oh * c.ow / (nv * t.lanes)) * math.ceil(c.oc / mr)


# ---- CPU Winograd F(2x2, 3x3) ---------------------------------------------------------
M_TILE, R_TILE = 2, 4  # output / input tile edge


def winograd_applies(c: Conv) -> bool:
    """3x3, stride 1, dilation 1, groups 1 (any padding)."""
    return (c.kh, c.kw, tuple(c.stride), tuple(c.dilation), c.groups) == (
        3, 3, (1, 1), (1, 1), 1,
    )  # fmt: skip


def winograd_wins(c: Conv) -> bool:
    """Shape part of ``cpu_winograd.wins`` (see there for the measurements behind it)."""
    return winograd_applies(c) and c.ic >= 64 and c.oc >= 64 and c.ic * c.oc >= 64 * 128


def winograd_grid(c: Conv) -> tuple[int, int]:
    """(tile rows, tile columns) of 2x2 output tiles covering OH x OW."""
    return math.ceil(c.oh / M_TILE), math.ceil(c.ow / M_TILE)


def winograd_tiles(c: Conv, t: Simd) -> tuple[int, int]:
    """(ocb, pt): channels per SIMD block and Winograd tiles per register tile."""
    vecs = 2 if c.oc > t.lanes else 1
    budget = (t.vector_regs - vecs - 2) // vecs
    th, tw = winograd_grid(c)
    return t.lanes * vecs, max(1, min(budget, 14, th * tw))


def winograd_tasks(c: Conv, t: Simd) -> int:
    """Parallel (batch, transform element, OC block, tile block) tasks of the batched GEMM."""
    ocb, pt = winograd_tiles(c, t)
    th, tw = winograd_grid(c)
    return c.n * 16 * math.ceil(c.oc / ocb) * math.ceil(th * tw / pt)


# ---- CPU matmul / GEMV (cpu_rules.schedule_matmul) --------------------------------------
MM_MAX_BLOCKS_PER_TASK = 16  # x 2 vectors of accumulators each: AVX-512's 32 registers
# a weight from this size on is spread over every core: below it one task streams it faster
# than the thread pool wakes up (H100 host: 300 KB 1.8x slower spread, 400-660 KB 0.98-1.57x)
MM_SPREAD_BYTES = 384 << 10
# ... on CPUs of this many cores or more: on the 2-vCPU dev VM two half-width tasks streamed a
# 51 MB weight 2.2x slower than one; on the H100 host's 16 vCPUs spreading was 1.4x faster
# (median over 46 GEMVs, net of the day's speed) and up to 5x (K 4096, N 500: 405 -> 79 us)
MM_SPREAD_MIN_CORES = 4


def matmul_vector_block(n: int, lanes: int) -> int:
    """Output columns of one column block (two SIMD vectors where N has them)."""
    return 2 * lanes if n >= 2 * lanes else lanes


def matmul_blocks_per_task(blocks: int, row_tiles: int, weight_bytes: int, cores: int) -> int:
    """Column blocks per parallel task: the largest divisor of ``blocks`` up to
    :data:`MM_MAX_BLOCKS_PER_TASK` (the register tile), but for a weight of
    :data:`MM_SPREAD_BYTES` or more (on :data:`MM_SPREAD_MIN_CORES` cores or more) only as large
    as still gives every core a task. Grouping alone had left a GEMV of N <= 512 on one thread
    and N = 4096 on 8 of 16 cores."""
    if blocks <= 0:
        return 1
    sizes = [d for d in range(1, MM_MAX_BLOCKS_PER_TASK + 1) if blocks % d == 0]
    if weight_bytes >= MM_SPREAD_BYTES and cores >= MM_SPREAD_MIN_CORES:
        want = min(cores, blocks * row_tiles)
        sizes = [d for d in sizes if blocks // d * row_tiles >= want] or [1]
    return max(sizes)


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
ENV = "CODL_GPU_CONV"

# Streaming multiprocessors / compute units per target arch; split-K aims at MIN_WAVES waves.
SMS = {"sm_90": 132, "sm_80": 108, "sm_86": 84, "sm_89": 128, "opencl": 4}
DEFAULT_SMS = 80
MIN_WAVES = 2
MAX_SPLIT = 16
MIN_K_PER_SPLIT = 256  # below this a split's blocks spend more on loads than on FMAs
SUM_THREADS = 128  # threads per block of split-K's second (sum) pass

_override: list[str] = []


@contextlib.contextmanager
def use_variant(name: str) -> Iterator[None]:
    """Schedule with the tile table ``name`` (or ``"dlight"``) inside the ``with`` block."""
    if name not in VARIANTS and name != DECLINE:
        raise ValueError(f"unknown GPU conv variant {name!r}; known: {variant_names()}")
    _override.append(name)
    try:
        yield
    finally:
        _override.pop()


def variant_names() -> list[str]:
    """Every selectable variant, ``"dlight"`` included."""
    return [*VARIANTS, DECLINE]


def current_variant() -> str:
    name = _override[-1] if _override else os.environ.get(ENV, DEFAULT_VARIANT)
    if name not in VARIANTS and name != DECLINE:
        raise ValueError(f"{ENV}={name!r} is not a GPU conv variant; known: {variant_names()}")
    return name


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
WINOGRAD_ENV = "CODL_GPU_WINOGRAD"
GPU_WINOGRAD_MIN_IC = 32  # H100: 1.02-2.35x over the tiled conv on all 26 workload shapes with
#                          IC >= 32, 0.28-0.32x on the three with IC = 3
#                          (benchmarks/results/kernels-h100-winograd.json)
WINOGRAD_TRANSFORM_THREADS = 128  # threads per block of the transform kernels (memory-bound)
# grid keys of the input (v), weight (u) and output (y) transforms (spelled out once: the
# predictor's mirror asks for this grid on every prediction)
_TRANSFORM_KEYS = (
    ("v.blockIdx.x", "v.threadIdx.x"),
    ("u.blockIdx.x", "u.threadIdx.x"),
    ("y.blockIdx.x", "y.threadIdx.x"),
)


def gpu_winograd_enabled() -> bool:
    """On unless ``CODL_GPU_WINOGRAD=0``."""
    return os.environ.get(WINOGRAD_ENV, "") != "0"


def gpu_winograd_wins(c: Conv, min_ic: int = GPU_WINOGRAD_MIN_IC) -> bool:
    """Shape and switch part of ``gpu_winograd.wins`` (the dtype is the caller's check)."""
    return gpu_winograd_enabled() and winograd_applies(c) and c.ic >= min_ic


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
