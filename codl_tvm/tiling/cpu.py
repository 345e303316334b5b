"""CPU tile rules: direct NCHWc, 1x1 GEMM, Winograd F(2x2, 3x3), matmul / GEMV tasks."""

from __future__ import annotations

import math
from typing import NamedTuple

from . import variants as _variants
from .common import Conv, Simd


def even_blocks(n: int, most: int, even: bool | None) -> int:
    """Items per block for ``n`` items in blocks of at most ``most``: ``most``, or with
    ``even`` (``KernelVariants.cpu_even_tiles``; None: the schedules' current variants, the
    predictor passes its own) the fewest that keep that many blocks, so the last block is
    padded by fewer items than there are blocks (7 in blocks of at most 6: 2 of 4, not 6 + 1
    and 5 computed and dropped)."""
    if even is None:
        even = _variants.current_variants().cpu_even_tiles
    return math.ceil(n / math.ceil(n / most)) if even else most


# ---- CPU direct NCHWc (``cpu_conv.conv_tiles``) -------------------------------------------
def direct_tiles(c: Conv, t: Simd, even: bool | None = None) -> tuple[int, int]:
    """(ocb, x_tile): channels per SIMD block and output columns per register tile: as many
    as the registers hold beside the weight vectors and the broadcast (at most 14), shared
    evenly with ``even`` (:func:`even_blocks`)."""
    vecs = 2 if c.oc > t.lanes else 1
    budget = (t.vector_regs - vecs - 2) // vecs
    return t.lanes * vecs, even_blocks(c.ow, max(1, min(budget, 14, c.ow)), even)


def direct_tasks(c: Conv, t: Simd, even: bool | None = None) -> int:
    ocb, xt = direct_tiles(c, t, even)
    return math.ceil(c.oc / ocb) * c.n * c.oh * math.ceil(c.ow / xt)


# ---- CPU 1x1 GEMM ---------------------------------------------------------------------
MAX_VECS = 3  # pixel vectors per register tile; more only adds tail waste on small images


def gemm_applies(c: Conv) -> bool:
    """1x1, groups 1, any stride (its input pack samples the strided pixels; dilation is
    irrelevant)."""
    return (c.kh, c.kw, c.groups) == (1, 1, 1)


def gemm_wins(c: Conv, t: Simd, always: bool | None = None) -> bool:
    """Shape part of ``cpu_gemm.wins`` (see there for the measurements behind it): every 1x1
    conv at stride 1; at stride > 1 it won and lost by shape (KERNELS.md), so the
    direct conv keeps those, unless ``always`` (``KernelVariants.cpu_gemm == "always"``: every
    1x1 conv, to measure the two kernels on the same sub-ops). ``always`` None: the schedules'
    current variants; the predictor passes its own."""
    if not gemm_applies(c):
        return False
    if c.stride[0] == 1 and c.stride[1] == 1:
        return True
    if always is None:
        always = _variants.current_variants().cpu_gemm == "always"
    return always


# pixel vectors of the register tile with 16 vector registers (``cpu_gemm_rows``): 2 vectors
# leave room for 6 rows, 12 accumulators, where 3 leave 3 rows, 9 (MLAS's AVX2 SGEMM kernel is
# the same 6 x 16 tile); MobileNet-V2 CPU-only 1.06-1.12x on a 2-core AVX2 host (KERNELS.md).
# With 32 registers 3 vectors keep 27 accumulators; 2 would add one.
NARROW_VECS = 2


# a tile of fewer pixel vectors is taken where the image's pixels fill its tiles better; it
# must save more than this share of the lanes the best-filling tile computes, as fewer
# vectors load more weight broadcasts per FMA
PIXEL_TAIL_SLACK = 1 / 8
# ... and never fewer than this many where the tile may have them: with one vector every FMA
# needs a broadcast of its own. On a 2-core AVX2 host 7 x 7 images ran 1.06-1.36x as long with
# one 8-lane vector (56 lanes for 49 pixels) as with two (64), at 2 threads
# (benchmarks/cpu_gemm_fit_tiles.py)
FEWEST_FITTED_VECS = 2


def fitted_vecs(pixels: int, lanes: int, most: int, exact: bool = False) -> int:
    """Pixel vectors per register tile, up to ``most``: the most whose tiles compute at most
    :data:`PIXEL_TAIL_SLACK` more lanes than the tile that computes fewest (7 x 7 pixels on 16
    lanes: 3 vectors compute 96 lanes, 2 compute 64; 14 x 14: 240, 224 and 208), but not
    fewer than :data:`FEWEST_FITTED_VECS` (or ``most``, if fewer). ``exact``: the most whose
    tiles leave no pixel tail, where one does (so the GEMM can run in place: 56 x 56 on 16
    lanes takes 2 vectors, not 3)."""
    fewest = min(FEWEST_FITTED_VECS, most)
    whole = [nv for nv in range(fewest, most + 1) if pixels % (nv * lanes) == 0]
    if exact and whole:
        return max(whole)
    computed = {nv: math.ceil(pixels / (nv * lanes)) * nv * lanes for nv in range(1, most + 1)}
    least = min(computed.values())
    return max([nv for nv, lanes_done in computed.items()
                if nv >= fewest and lanes_done <= least * (1 + PIXEL_TAIL_SLACK)],
               default=fewest)  # fmt: skip


def gemm_tiles(c: Conv, t: Simd, rows: bool | None = None, fit: bool | None = None,
               in_place: bool | None = None) -> tuple[int, int]:
    """(mr, nv): OC rows and pixel SIMD vectors of the register tile.

    ``rows``, ``fit``, ``in_place``: ``KernelVariants.cpu_gemm_rows``, ``cpu_gemm_fit`` and
    ``cpu_gemm_in_place`` (None: the schedules' current variants; the predictor passes its
    own). ``fit``: the pixel vectors that fill the image's tiles (:func:`fitted_vecs`; with
    ``in_place``, at stride 1, those that leave no tail where some do); else as many as the
    pixels fill, up to the most."""
    if rows is None or fit is None or in_place is None:  # the predictor passes all three
        current = _variants.current_variants()
        rows = current.cpu_gemm_rows if rows is None else rows
        fit = current.cpu_gemm_fit if fit is None else fit
        in_place = current.cpu_gemm_in_place if in_place is None else in_place
    pixels = c.n * c.oh * c.ow
    most = NARROW_VECS if rows and t.vector_regs < 32 else MAX_VECS
    nv = max(1, min(most, math.ceil(pixels / t.lanes)))
    if fit:  # a task's tile never spans two images: the tail is per image
        exact = in_place and tuple(c.stride) == (1, 1)
        nv = fitted_vecs(c.oh * c.ow, t.lanes, nv, exact)
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


# In place, a task computes a run of consecutive pixel tiles for one OC block, so that each of
# its output channels is written as one run of this many pixels at most, not one tile (on 2
# AVX2 cores, caches flushed before each call, MobileNet-V2's and YOLO-V2's in-place 1x1 convs
# took 0.46-0.73x the packed GEMM's time with runs of 512 pixels, one 1.00x, and 0.73-1.34x
# with one tile per task, which writes each of OC rows 64 bytes at a time:
# benchmarks/cpu_gemm_in_place.py [--run-pixels 16])...
IN_PLACE_RUN_PIXELS = 512
# ... while leaving at least this many tasks per core where the image has them
IN_PLACE_TASKS_PER_CORE = 4


class GemmPlan(NamedTuple):
    """The 1x1 GEMM's register tile (``mr`` OC rows by ``nv`` pixel vectors) and, where it
    runs in place (:func:`gemm_plan`), the pixel tiles per task (``run``; 0: packed)."""

    mr: int
    nv: int
    run: int

    @property
    def in_place(self) -> bool:
        return self.run > 0


def gemm_plan(c: Conv, t: Simd, padded: bool, rows: bool | None = None,
              fit: bool | None = None, in_place: bool | None = None) -> GemmPlan:
    """The 1x1 GEMM's tile, and whether it reads its input and writes its output where they
    are (``KernelVariants.cpu_gemm_in_place``): at stride 1 without padding (``padded``: the
    conv pads its input), where the image's pixels fill whole tiles, a tile's pixels are
    consecutive floats of each input and output channel, so no packed copy of the input and
    no unpack pass is needed; elsewhere the pixel tail needs both. (OC always fills whole
    blocks: :func:`gemm_tiles` takes the largest block that pads it least, and a block of 1
    pads it not at all.) In place, a task is a run of whole tiles of one OC block: the most
    that divide the image's tiles, span at most :data:`IN_PLACE_RUN_PIXELS` and leave
    :data:`IN_PLACE_TASKS_PER_CORE` tasks per core (1 if none does). ``rows``, ``fit``,
    ``in_place``: the variants (None: the schedules' current ones)."""
    if in_place is None:
        in_place = _variants.current_variants().cpu_gemm_in_place
    mr, nv = gemm_tiles(c, t, rows, fit, in_place)
    np_ = nv * t.lanes
    if (not in_place or padded or tuple(c.stride) != (1, 1) or not gemm_applies(c)
            or c.oc % mr or (c.oh * c.ow) % np_):
        return GemmPlan(mr, nv, 0)
    tiles, blocks = c.oh * c.ow // np_, c.n * (c.oc // mr)
    want = IN_PLACE_TASKS_PER_CORE * t.cores
    run = max([r for r in range(1, max(1, IN_PLACE_RUN_PIXELS // np_) + 1)
               if tiles % r == 0 and (r == 1 or tiles // r * blocks >= want)])
    return GemmPlan(mr, nv, run)


def gemm_in_place(c: Conv, t: Simd, padded: bool, in_place: bool | None = None,
                  rows: bool | None = None, fit: bool | None = None) -> bool:
    """Whether the 1x1 GEMM runs in place (:func:`gemm_plan`)."""
    return gemm_plan(c, t, padded, rows, fit, in_place).in_place


def gemm_tasks(c: Conv, t: Simd, rows: bool | None = None, fit: bool | None = None, *,
               padded: bool = False, in_place: bool | None = None) -> int:
    """Parallel tasks: (pixel tile, OC block), or in place (:func:`gemm_plan`), (run of
    pixel tiles, OC block)."""
    plan = gemm_plan(c, t, padded, rows, fit, in_place)
    tiles = math.ceil(c.oh * c.ow / (plan.nv * t.lanes)) // max(1, plan.run)
    return c.n * tiles * math.ceil(c.oc / plan.mr)


# ---- CPU Winograd F(2x2, 3x3) ---------------------------------------------------------
M_TILE, R_TILE = 2, 4  # output / input tile edge


def winograd_applies(c: Conv) -> bool:
    """3x3, stride 1, dilation 1, groups 1 (any padding)."""
    return (c.kh, c.kw, tuple(c.stride), tuple(c.dilation), c.groups) == (
        3, 3, (1, 1), (1, 1), 1,
    )  # fmt: skip


def winograd_wins(c: Conv, narrow: bool | None = None) -> bool:
    """Shape part of ``cpu_winograd.wins`` (see there for the measurements behind it): 64 or
    more channels in and out, and with ``narrow`` off (``KernelVariants.cpu_winograd_64x64``;
    None: the schedules' current variants) at least 64 x 128 of them."""
    if narrow is None:
        narrow = _variants.current_variants().cpu_winograd_64x64
    return (winograd_applies(c) and c.ic >= 64 and c.oc >= 64
            and (narrow or c.ic * c.oc >= 64 * 128))


def winograd_grid(c: Conv) -> tuple[int, int]:
    """(tile rows, tile columns) of 2x2 output tiles covering OH x OW."""
    return math.ceil(c.oh / M_TILE), math.ceil(c.ow / M_TILE)


def winograd_tiles(c: Conv, t: Simd, even: bool | None = None) -> tuple[int, int]:
    """(ocb, pt): channels per SIMD block and Winograd tiles per register tile.

    ``pt`` is at most what the registers hold beside the weight vectors and the broadcast,
    shared evenly with ``even`` (:func:`even_blocks`): the 16 tiles of a 7x7 image on 32
    registers are 2 blocks of 8, where 2 blocks of 14 computed 28 tiles.
    """
    vecs = 2 if c.oc > t.lanes else 1
    budget = (t.vector_regs - vecs - 2) // vecs
    th, tw = winograd_grid(c)
    return t.lanes * vecs, even_blocks(th * tw, max(1, min(budget, 14, th * tw)), even)


def winograd_tasks(c: Conv, t: Simd, even: bool | None = None) -> int:
    """Parallel (batch, transform element, OC block, tile block) tasks of the batched GEMM."""
    ocb, pt = winograd_tiles(c, t, even)
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


# ---- CPU pool (mirror of cpu_rules.schedule_pool) -------------------------------------------
def pool_copies_rows(is_max: bool, padded_rows: int) -> bool:
    """Whether the CPU pool's tasks copy their padded input rows first (the pad computed at the
    task loop) instead of inlining the pad's bounds checks into the window loop;
    ``padded_rows``: the rows the pad adds, top and bottom together.

    Inlined, a max pool that pads rows compiles to scalar window loops on Sapphire Rapids
    (3x3/2 at every width tried from 7 to 113); with its rows copied, the window vectorizes
    as an unpadded pool's does. On the H100 host's CPU such pools ran a median 0.80x their
    inlined time (160 sub-ops; ResNet-18's 112x112 stem pool 0.60x), the slower ones all
    under 6.5 us. Pools that pad only columns, and average pools, were vectorized (by
    gathers) already and ran up to 1.34x slower with copied rows, so they keep the inlined
    pad (``benchmarks/results/padpool-h100``)."""
    return is_max and padded_rows > 0


# ---- CPU grouped/depthwise conv (mirror of cpu_group_conv.schedule_grouped) ------------------
DW_TASKS_PER_CORE = 8  # tasks per core a depthwise conv keeps, for balance across cores


def depthwise_rows(n: int, oc: int, oh: int, cores: int, blocks: bool = True) -> int:
    """Output rows of one channel that one task of the CPU's grouped/depthwise conv computes:
    as many as keep :data:`DW_TASKS_PER_CORE` tasks per core, so a task's padded input rows
    and its epilogue stay in its cache and each input row is read from memory once, not once
    per window row; 1 where ``blocks`` is off (``KernelVariants.cpu_depthwise_blocks``)."""
    if not blocks:
        return 1
    return max(1, min(oh, n * oc * oh // (DW_TASKS_PER_CORE * max(cores, 1))))
