"""GPU conv blocking terms: occupancy from the tile and Machine, ragged-tile and K-step terms."""

from __future__ import annotations

from dataclasses import replace

from codl_tvm import tiling
from codl_tvm.predictor.blocking import gpu_tiled, gpu_winograd, resident_blocks
from codl_tvm.predictor.mirror import Machine, gpu_plan
from codl_tvm.predictor.opspec import OpSpec

H100 = Machine()


def conv(h: int, w: int, ic: int, oc: int, k: int = 1) -> OpSpec:
    pad = k // 2
    return OpSpec("conv2d", h, w, ic, oc, k, k, 1, 1, (pad, pad, pad, pad), 1, 1)


def test_resident_blocks_follow_threads_and_registers():
    # 256-thread tiles: 2048 threads per SM allow 8; the 128x64 tile's 68 registers allow 3
    assert resident_blocks(tiling.BIG, H100) == 3
    assert resident_blocks(tiling.MID, H100) == 5
    assert resident_blocks(tiling.TINY_N, H100) == 10
    # a GPU with 256-thread work groups (opencl) keeps at most 2 of them per compute unit
    small = replace(H100, max_threads=256)
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
    assert base[-1] == base[-2]  # 13x13 tiles = 169: a ragged tile column
    assert gpu_winograd(conv(64, 64, 256, 256, 3), H100)[-1] == 0  # 1024 tiles: whole
    fewer_sms = gpu_winograd(conv(26, 26, 256, 512, 3), replace(H100, sms=4))
    assert fewer_sms[-2] > base[-2]  # more waves of resident blocks on a smaller GPU
