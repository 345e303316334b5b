"""The CPU 1x1 GEMM in place (``KernelVariants.cpu_gemm_in_place``): where an unpadded
stride-1 conv's pixels fill whole register tiles and its OC whole blocks, the kernel reads the
input where it is and writes the output (epilogue included) from its accumulators, a task
covering a run of tiles. It equals the unscheduled PrimFunc on awkward shapes (one-tile images,
batch 2, runs that must divide the tiles), keeps the packed kernel wherever a tail or padding
needs it, and the predictor's mirror and terms follow what runs."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from codl_tvm import tiling
from codl_tvm.predictor import cpu_terms
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.mirror import kernel
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.tiling import ConvShape, KernelVariants, use_variants
from tests.helpers import AVX2, Regs, pointwise

TOL = 1e-5
AVX2_REGS = Regs(8, 16)  # AVX2's tile: 2 pixel vectors (16 pixels) by up to 6 channels


def buffers(func) -> set[str]:
    """Names of the buffers a scheduled PrimFunc allocates."""
    return {b.name for b in func.body.block.alloc_buffers}


def test_whole_tiles_run_in_place_and_tails_do_not():
    assert tiling.gemm_in_place(pointwise(16, 96, 112, 112), AVX2_REGS, padded=False)
    assert tiling.gemm_in_place(pointwise(24, 144, 56, 56), AVX2_REGS, padded=False)
    # 14 x 14 = 196 pixels leave a tail of 4 in 16-pixel tiles; 7 x 7 one of 1
    assert not tiling.gemm_in_place(pointwise(96, 576, 14, 14), AVX2_REGS, padded=False)
    assert not tiling.gemm_in_place(pointwise(160, 960, 7, 7), AVX2_REGS, padded=False)
    # padding, stride 2 or the variant off: packed
    assert not tiling.gemm_in_place(pointwise(16, 96, 112, 112), AVX2_REGS, padded=True)
    strided = ConvShape(1, 16, 96, 56, 56, 1, 1, stride=(2, 2))
    assert not tiling.gemm_in_place(strided, AVX2_REGS, padded=False)
    # the block height always divides OC (a prime OC takes blocks of 1)
    assert tiling.gemm_in_place(pointwise(16, 7, 16, 16), AVX2_REGS, padded=False)
    assert not tiling.gemm_in_place(pointwise(16, 96, 112, 112), AVX2_REGS, padded=False,
                                    in_place=False)


def test_avx512_takes_the_tile_that_leaves_no_tail():
    avx512 = Regs(16, 32, 16)
    for hw in (56, 112):  # 2 vectors (32 pixels) divide these images; 3 (48) do not
        c = pointwise(64, 64, hw, hw)
        assert tiling.gemm_tiles(c, avx512, in_place=False)[1] == 3
        assert tiling.gemm_tiles(c, avx512)[1] == 2
        assert tiling.gemm_in_place(c, avx512, padded=False)
    for hw in (7, 28):  # no tile of 2 or 3 vectors divides 49 or 784 pixels: as before
        c = pointwise(64, 64, hw, hw)
        assert tiling.gemm_tiles(c, avx512) == tiling.gemm_tiles(c, avx512, in_place=False)
    strided = ConvShape(1, 64, 64, 56, 56, 1, 1, stride=(2, 2))
    assert tiling.gemm_tiles(strided, avx512)[1] == 3


@given(pixels=st.integers(1, 5000), lanes=st.sampled_from([4, 8, 16]), most=st.integers(1, 3))
def test_an_exact_tile_leaves_no_tail_where_one_can(pixels, lanes, most):
    nv = tiling.fitted_vecs(pixels, lanes, most, exact=True)
    fewest = min(tiling.cpu.FEWEST_FITTED_VECS, most)
    if any(pixels % (v * lanes) == 0 for v in range(fewest, most + 1)):
        assert pixels % (nv * lanes) == 0
    else:
        assert nv == tiling.fitted_vecs(pixels, lanes, most)


@given(tiles=st.integers(1, 2000), oc=st.integers(1, 600), cores=st.integers(1, 64))
def test_a_run_divides_the_tiles_and_leaves_tasks_for_the_cores(tiles, oc, cores):
    regs = Regs(8, 16, cores)
    c = ConvShape(1, 32, oc, 1, tiles * 16, 1, 1)  # one row of whole 16-pixel tiles
    mr, _, run = tiling.gemm_plan(c, regs, padded=False)
    blocks = -(-oc // mr)
    assert tiles % run == 0 and run * 16 <= max(16, tiling.cpu.IN_PLACE_RUN_PIXELS)
    assert run == 1 or tiles // run * blocks >= tiling.cpu.IN_PLACE_TASKS_PER_CORE * cores
    # no longer run would do
    assert not any(tiles % r == 0 and tiles // r * blocks >= tiling.cpu.IN_PLACE_TASKS_PER_CORE
                   * cores for r in range(run + 1, tiling.cpu.IN_PLACE_RUN_PIXELS // 16 + 1))


def test_the_schedule_drops_the_packed_input_and_the_unpack_pass():
    func = T.conv2d_func((1, 16, 32, 32), (96, 16, 1, 1), bias_relu=True)
    new = T.schedule(func, AVX2)
    with use_variants(KernelVariants(cpu_gemm_in_place=False)):
        old = T.schedule(func, AVX2)
    assert {"codl_xpack", "codl_gemm"} <= buffers(old)
    assert not {"codl_xpack", "codl_gemm"} & buffers(new)
    blocking = blocking_of(new)
    assert blocking.algorithm == "gemm-1x1"
    c = pointwise(16, 96, 32, 32)
    assert blocking.num_blocks == tiling.gemm_tasks(c, Regs(8, 16)) in T.parallel_extents(new)
    # runs of tiles: fewer tasks than register tiles
    assert blocking.num_blocks < tiling.gemm_tasks(c, Regs(8, 16), in_place=False)


@st.composite
def whole_tile_cases(draw):
    """Convs whose pixels fill whole 16-pixel tiles (AVX2), some with OC in whole blocks."""
    w = draw(st.sampled_from([16, 32, 48, 8, 4, 2]))
    h = draw(st.sampled_from([1, 2, 4, 8])) * 16 // w if w < 16 else draw(st.integers(1, 9))
    return dict(x=(draw(st.integers(1, 2)), draw(st.integers(1, 40)), h, w),
                oc=draw(st.sampled_from([1, 4, 5, 6, 12, 18, 24, 30, 7, 13])),
                bias_relu=draw(st.booleans()))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=whole_tile_cases(), rows=st.booleans())
def test_in_place_equals_the_reference(case, rows):
    x, oc = case.pop("x"), case.pop("oc")
    func = T.conv2d_func(x, (oc, x[1], 1, 1), **case)
    with use_variants(KernelVariants(cpu_gemm_rows=rows)):
        assert T.check_cpu(func, AVX2) <= TOL


def test_one_tile_and_a_padded_conv_equal_the_reference():
    for x, w, attrs in (((1, 3, 4, 4), (6, 3, 1, 1), {}),  # one tile, one task
                        ((2, 8, 16, 16), (12, 8, 1, 1), {"bias_relu": True}),
                        ((1, 8, 14, 16), (12, 8, 1, 1), {"padding": (1, 0, 1, 0)})):
        func = T.conv2d_func(x, w, **attrs)
        assert T.check_cpu(func, AVX2) <= TOL


def test_the_predictor_prices_what_runs():
    """A predictor of samples from before the field prices the packed GEMM; one of newer
    samples the in-place one: the same tasks as the schedule, no pack and no unpack."""
    old = dataclasses.replace(reference(), lanes=8)  # AVX2: 16 vector registers
    assert not old.variants.cpu_gemm_in_place
    new = dataclasses.replace(old, variants=KernelVariants())
    spec, c = OpSpec("conv2d", 56, 56, 24, 144), pointwise(24, 144, 56, 56)
    assert kernel("cpu", spec, new).num_blocks == tiling.gemm_tasks(c, new)
    assert kernel("cpu", spec, old).num_blocks == tiling.gemm_tasks(
        c, old, rows=False, fit=False, in_place=False)
    names = cpu_terms.CPU_GEMM_TERMS
    terms_old = dict(zip(names, cpu_terms.cpu_gemm(spec, old), strict=True))
    terms_new = dict(zip(names, cpu_terms.cpu_gemm(spec, new), strict=True))
    assert terms_old["input_pack"] > 0 and terms_old["unpack"] > 0
    assert terms_new["input_pack"] == terms_new["unpack"] == 0
    # a tail keeps both passes
    tail = OpSpec("conv2d", 14, 14, 96, 576)
    terms_tail = dict(zip(names, cpu_terms.cpu_gemm(tail, new), strict=True))
    assert terms_tail["input_pack"] > 0 and terms_tail["unpack"] > 0
