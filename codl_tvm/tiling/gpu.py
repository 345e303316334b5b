"""GPU tile rules: the tiled implicit GEMM's tile tables, split-K, shared-memory padding, GPU
Winograd's grids, the global-pool threshold."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

from . import variants as _variants
from .common import Conv
from .cpu import winograd_applies, winograd_grid
from .gpu_tiles import (  # noqa: F401 - re-exported: the tile tables are part of this API
    BIG,
    DECLINE,
    DEFAULT_VARIANT,
    MID,
    NARROW_OC,
    THIN_OC,
    TINY_N,
    VARIANTS,
    ShapeClass,
    Tile,
    variant_names,
)

# ---- GPU tiled implicit GEMM ------------------------------------------------------------
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



# Streaming multiprocessors / compute units the kernels are tiled for; split-K aims at MIN_WAVES
# waves. The GPU's own count comes from its pair (``DevicePair.gpu_sms``, detected where the
# GPU is: :func:`use_gpu_sms`); these datasheet counts per arch (the largest part of each) are
# the fallback of a cross-compile that names none.
SMS = {"sm_90": 132, "sm_80": 108, "sm_86": 84, "sm_89": 128, "opencl": 4}
DEFAULT_SMS = 80
_gpu_sms: list[int] = []
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


def current_variant() -> str:
    """The tile table the schedules use now (``KernelVariants.gpu_conv``)."""
    return _variants.current_variants().gpu_conv


def sm_count(arch: str, kind: str) -> int:
    """SMs (compute units) the kernels are tiled for: the innermost :func:`use_gpu_sms`, else
    the datasheet count of the target ``arch`` / target kind."""
    return _gpu_sms[-1] if _gpu_sms else SMS.get(arch, SMS.get(kind, DEFAULT_SMS))


@contextlib.contextmanager
def use_gpu_sms(sms: int | None) -> Iterator[None]:
    """Tile the GPU kernels built inside the ``with`` block for ``sms`` SMs (None: the arch's
    datasheet count)."""
    if sms is None:
        yield
        return
    if int(sms) < 1:
        raise ValueError(f"a GPU has at least one SM, not {sms}")
    _gpu_sms.append(int(sms))
    try:
        yield
    finally:
        _gpu_sms.pop()


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
# the GPU's one-output-per-thread conv for OC of at most this (RGB outputs), and its GEMV
# rule for matmuls of at most this many rows (a batch-1 dense): predicates of the dispatch
# (schedules/dispatch.py) and of the predictor's mirror of it alike
THIN_OC_MAX = 4
GEMV_MAX_ROWS = 4
