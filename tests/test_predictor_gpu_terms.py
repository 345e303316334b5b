"""GPU conv blocking terms: occupancy from the tile and Machine, ragged-tile and K-step terms,
shared-memory bank conflicts, serialised im2col loads."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from codl_tvm import tiling
from codl_tvm.predictor.blocking import gpu_tiled, gpu_winograd, resident_blocks
from codl_tvm.predictor.gpu_terms import (
    POOL_L2_SHARE,
    gpu_elementwise,
    gpu_gemv,
    gpu_pool,
    smem_store_wavefronts,
)
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.mirror import conv_shape, gpu_plan
from codl_tvm.predictor.opspec import OpSpec

H100 = reference()


def conv(h: int, w: int, ic: int, oc: int, k: int = 1) -> OpSpec:
    pad = k // 2
    return OpSpec("conv2d", h, w, ic, oc, k, k, 1, 1, (pad, pad, pad, pad), 1, 1)


def test_resident_blocks_follow_threads_and_registers():
    # 256-thread tiles: 2048 threads per SM allow 8; the 128x64 tile's 68 registers allow 3
    assert resident_blocks(tiling.BIG, H100) == 3
    assert resident_blocks(tiling.MID, H100) == 5
    assert resident_blocks(tiling.TINY_N, H100) == 10
    # a GPU of 512 threads per compute unit keeps at most 2 work groups of 256 on each
    small = replace(H100, max_threads=256, gpu_sm_threads=512)
    assert resident_blocks(tiling.MID, small) == 2
    assert all(resident_blocks(t, small) >= 1 for t in (tiling.BIG, tiling.THIN_OC))


def test_tiled_ragged_term_counts_k_steps_only_for_a_ragged_pixel_tile():
    whole, ragged = conv(32, 32, 64, 128), conv(13, 13, 64, 128)  # 1024 vs 169 pixels
    for s, is_ragged in ((whole, False), (ragged, True)):
        row, split, k_split = gpu_plan(s, H100, tiling.DEFAULT_VARIANT)
        assert (s.out_h * s.out_w % row.tile.bn != 0) == is_ragged
        steps = gpu_tiled(s, H100)[-1]
        assert steps == (k_split // row.tile.bk if is_ragged else 0)


def test_winograd_k_step_terms_scale_with_ic_and_waves():
    base = gpu_winograd(conv(26, 26, 256, 512, 3), H100)
    deeper = gpu_winograd(conv(26, 26, 512, 512, 3), H100)
    assert deeper[-2] == 2 * base[-2] > 0  # twice the K steps, same waves
    assert base[-1] == 0  # g + U = 13 MB: within the L2 share, no step waits on DRAM
    fewer_sms = gpu_winograd(conv(26, 26, 256, 512, 3), replace(H100, sms=4))
    assert fewer_sms[-2] > base[-2]  # more waves of resident blocks on a smaller GPU


def test_winograd_fma_issue_counts_the_warps_of_a_block():
    """Regression: the FMA term counted one thread's FMAs per block, so a 64x64
    block of 8 warps cost what a 64x32 block of 4 did; the H100 rows of the two tiles were
    off in opposite directions (1.1-1.2x over, 0.86-0.92x under)."""
    s = conv(26, 26, 256, 512, 3)
    row, th, tw = tiling.gpu_winograd_gemm(conv_shape(s))
    t = row.tile
    blocks = 16 * math.ceil(s.OC / t.bm) * math.ceil(th * tw / t.bn)
    kp = math.ceil(s.IC / t.bk) * t.bk
    per_sm = math.ceil(blocks / H100.sms)
    assert gpu_winograd(s, H100)[0] == per_sm * (t.threads // 32) * t.tm * t.tn * kp / 4
    assert len(gpu_winograd(s, H100)) == 6  # no staging term: both tiles conflict-free


@pytest.mark.parametrize(("k", "per_four_steps"), [
    (2816, 0),  # K a multiple of 16: no bounds check in the loop
    (4081, 1),  # n = 256 steps, unrolled by 4 or 8: one L2 round trip per 4 steps
    (2833, 2),  # n = 178: unrolled by 2, a round trip per 2 steps
    (479, 0),  # n = 30: fully unrolled, the loads batch
])  # fmt: skip
def test_gemv_ragged_k_round_trips_follow_nvccs_unrolling(k: int, per_four_steps: int):
    """Regression: the guarded K loop's L2 round trips depend on how nvcc unrolls
    it (SASS of ~40 step counts); one cost for every ragged K left K 4081 at 1.2-1.3x and
    2833 / 3342 at 0.6-0.9x."""
    t = gpu_gemv(OpSpec("dense", 1, 1, k, 512), H100)
    assert t[-1] == t[0] * per_four_steps


def _wavefronts(rows: int, cols: int, stride: int, k_inner: bool) -> int:
    """Brute force: shared-memory wavefronts of storing a [rows][cols] tile, 32 lanes a store,
    lanes along rows (``k_inner``) or along columns."""
    total = 0
    for first in range(0, rows * cols, 32):
        banks: dict[int, set[int]] = {}
        for i in range(first, min(first + 32, rows * cols)):
            k, c = (i % rows, i // rows) if k_inner else divmod(i, cols)
            banks.setdefault((k * stride + c) % 32, set()).add(k * stride + c)
        total += max(map(len, banks.values()))
    return total


@pytest.mark.parametrize("tile", [tiling.BIG, tiling.MID, tiling.TINY_N, tiling.NARROW_OC])
def test_padded_weight_rows_leave_at_most_two_way_conflicts(tile):
    """Unpadded [bk][bm] weight rows put a warp's K-column in one bank (bk-way conflicts:
    the 64x32 / 64x64 tiles' K steps cost 1.5x / 2.2x a 32x128 step on the H100). Rows
    padded to ``bm + tm`` floats: at most 2-way, and the term counts exactly that."""
    stride = tiling.wt_row_stride(tile)
    assert stride % tiling.SMEM_BANKS == tile.tm and stride % tile.tm == 0  # aligned reads
    stores = tile.bk * tile.bm // 32
    assert _wavefronts(tile.bk, tile.bm, tile.bm, True) == stores * tile.bk  # unpadded
    padded = _wavefronts(tile.bk, tile.bm, stride, True)
    assert padded <= 2 * stores
    im2col = _wavefronts(tile.bk, tile.bn, tile.bn, False)
    assert im2col == tile.bk * tile.bn // 32  # lanes along pixels: conflict-free
    assert smem_store_wavefronts(tile) == padded + im2col


@pytest.mark.parametrize(("k", "serial"), [(1, False), (2, False), (3, True), (4, False),
                                           (5, True), (7, True)])
def test_im2col_loads_serialise_for_windows_not_a_power_of_two(k, serial):
    """nvcc keeps the bounds test of a div/mod by KH*KW or KW (not a power of two) as a branch
    per im2col load, and waits for each load in turn (SASS of the H100 kernels)."""
    term = gpu_tiled(conv(28, 28, 64, 64, k), H100)[-2]
    assert (term > 0) == serial


def test_elementwise_bytes_count_only_beyond_half_the_l2():
    """The H100's elementwise kernel runs at DRAM speed once input + output pass half its L2
    (two partitions); below that only the waves of resident threads count."""
    small, big = (OpSpec("elementwise", h, h, 64, 64, 1, 1, 1, 1, (0, 0, 0, 0), 1, 1)
                  for h in (64, 512))  # 2 MB and 128 MB moved  # fmt: skip
    waves, moved = gpu_elementwise(small, H100)
    assert waves == 1 and moved == 0
    waves, moved = gpu_elementwise(big, H100)
    assert waves == math.ceil(512 * 512 * 64 / (2048 * H100.sms)) and moved == 2 * 512**2 * 64 * 4


def test_pool_bytes_past_the_l2_share_come_from_dram():
    """Regression: H100 pools turn slower per byte gradually from ~20 MB moved
    (the 81x81 k2s2 sweep at 500-1000 channels): the share of the footprint past 40% of the
    L2 streams from DRAM. An avg pool also writes and rereads its sum workspace."""

    def pool(kind: str, c: int) -> OpSpec:
        return OpSpec(kind, 81, 81, c, c, 2, 2, 2, 2, (0, 0, 0, 0), 1, 1)

    *_, read, written = gpu_pool(pool("pool_max", 500), H100)  # 13.1 + 3.2 MB
    assert read == written == 0
    _, r, w, read, written = gpu_pool(pool("pool_max", 1000), H100)  # 26.2 + 6.4 MB
    share = 1 - 0.4 * H100.l2_bytes / (r + w)
    assert read == pytest.approx(r * share) and written == pytest.approx(w * share) and share > 0
    *_, avg_read, _ = gpu_pool(pool("pool_avg", 1000), H100)
    assert avg_read > read  # the workspace: read + 2 x written


def test_tiled_outputs_of_odd_planes_have_their_own_unit():
    """Regression: a 1266-channel output of 53x53 pixels took 21.9 us on the H100,
    one of 52x53 13.7 us (same kernel, same tiles, same SASS stores); the written elements
    of odd-length planes count in their own term."""
    odd = OpSpec("conv2d", 104, 104, 3, 1266, 2, 2, 2, 2, (1, 1, 1, 1), 1, 1)
    even = OpSpec("conv2d", 102, 104, 3, 1266, 2, 2, 2, 2, (1, 1, 1, 1), 1, 1)
    t_odd, t_even = gpu_tiled(odd, H100), gpu_tiled(even, H100)
    assert len(t_odd) == len(t_even)
    i = next(i for i, (a, b) in enumerate(zip(t_odd, t_even, strict=True)) if a == 0 < b)
    assert t_even[i] == 1266 * 52 * 53 and t_odd[i + 1] == 1266 * 53 * 53 and t_even[i + 1] == 0


def test_split_k_partials_are_aligned_whatever_the_plane():
    """Regression: split-K's pass 1 writes its partial sums to planes padded to
    whole pixel tiles (YOLO-V2 13x13: stride 192, not 169) and pass 2 writes one output element
    per thread, so an odd output plane costs split-K nothing extra. Counting its partials as
    odd-plane writes fitted that unit on tiny random convs and put held-out YOLO-V2's 13x13
    split-K rows 1.6-2.3x too slow."""
    s = OpSpec("conv2d", 13, 13, 1024, 512, 1, 1, 1, 1, (0, 0, 0, 0), 1, 1)
    row, split, _ = gpu_plan(s, H100, tiling.DEFAULT_VARIANT)
    assert split > 1
    t = gpu_tiled(s, H100)
    blocks = math.ceil(512 / row.tile.bm) * math.ceil(169 / row.tile.bn) * split
    assert t[3] == blocks * row.tile.bm * row.tile.bn and t[4] == 0


def test_winograd_k_steps_wait_on_dram_for_the_weights_beyond_the_l2_share():
    """Regression: YOLO-V2's 13x13 Winograd layers (g + U = 25 floats per
    (ic, oc): 31-157 MB) ran 0.82-0.86x of the in-L2 K-step model on the H100, at every OC
    split; the single-buffered GEMM reads U in the order the weight transform wrote it, so
    beyond the L2 share the early K rows come from DRAM."""
    small = conv(14, 14, 256, 512, 3)  # 13 MB
    edge = conv(14, 14, 512, 512, 3)  # 26 MB: VGG-16 / POSENET's largest
    big = conv(13, 13, 1024, 1024, 3)  # 105 MB
    assert gpu_winograd(small, H100)[-1] == 0
    for s in (edge, big):
        t = gpu_winograd(s, H100)
        share = 1 - POOL_L2_SHARE * H100.l2_bytes / (25 * 4 * s.IC * s.OC)
        assert t[-1] == pytest.approx(t[-2] * share) and t[-1] > 0
    assert gpu_winograd(big, replace(H100, l2_bytes=1 << 40))[-1] == 0  # all in L2
