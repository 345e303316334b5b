"""The CPU 1x1 GEMM's pixel vectors fitted to the image (``KernelVariants.cpu_gemm_fit``):
fewer vectors per register tile where the pixels fill those tiles better. The kernel equals
the unscheduled PrimFunc both ways on awkward shapes (pixel tails, one-pixel images, OC that no
tile height divides, stride 2 under ``cpu_gemm=always``), and the predictor's mirror counts
the tasks of the tile its samples ran."""

from __future__ import annotations

import dataclasses
import math

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from codl_tvm import tiling
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.mirror import kernel
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.tiling import KernelVariants, use_variants
from tests.helpers import AVX2, Regs, pointwise

TOL = 1e-5


def computed(pixels: int, lanes: int, nv: int) -> int:
    return math.ceil(pixels / (nv * lanes)) * nv * lanes


def test_small_images_on_avx512_take_fewer_vectors():
    avx512 = Regs(16, 32)
    assert tiling.gemm_tiles(pointwise(960, 160, 7, 7), avx512, fit=False)[1] == 3  # 96 lanes
    assert tiling.gemm_tiles(pointwise(960, 160, 7, 7), avx512, fit=True)[1] == 2  # 64
    assert tiling.gemm_tiles(pointwise(96, 576, 14, 14), avx512, fit=True)[1] == 2  # 224
    for big in (28, 56, 112):  # the pixels fill 3-vector tiles within the slack: kept
        assert tiling.gemm_tiles(pointwise(64, 64, big, big), avx512, fit=True,
                                 in_place=False)[1] == 3


@given(pixels=st.integers(1, 5000), lanes=st.sampled_from([4, 8, 16]),
       most=st.integers(1, 3))
def test_the_fitted_tile_computes_within_the_slack_of_the_best(pixels, lanes, most):
    nv = tiling.fitted_vecs(pixels, lanes, most)
    fewest = min(tiling.cpu.FEWEST_FITTED_VECS, most)
    least = min(computed(pixels, lanes, v) for v in range(1, most + 1))
    assert fewest <= nv <= most
    # within the slack of the best-filling tile, unless only fewer vectors would be
    assert nv == fewest or computed(pixels, lanes, nv) <= least * (
        1 + tiling.cpu.PIXEL_TAIL_SLACK)
    # no larger tile would have been as good
    assert all(computed(pixels, lanes, v) > least * (1 + tiling.cpu.PIXEL_TAIL_SLACK)
               for v in range(nv + 1, most + 1))


def test_a_fitted_tile_keeps_two_vectors_where_it_may():
    # regression: on AVX2 a 7 x 7 image took one 8-lane vector (56 lanes against 64), and each
    # FMA its own weight broadcast: 1.06-1.36x as long at 2 threads
    for oc, ic in ((384, 832), (960, 160), (160, 960)):
        assert tiling.gemm_tiles(pointwise(ic, oc, 7, 7), Regs(8, 16), fit=True)[1] == 2
    assert tiling.fitted_vecs(49, 8, 1) == 1  # a tile of one vector stays one


def test_the_schedule_follows_the_variant():
    # 5 x 5 pixels with up to 3 vectors (the 4 x 3 tile): 2 vectors compute 32 lanes, 3 48
    func = T.conv2d_func((1, 160, 5, 5), (96, 160, 1, 1))
    with use_variants(KernelVariants(cpu_gemm_rows=False)):
        new = blocking_of(T.schedule(func, AVX2))
    with use_variants(KernelVariants(cpu_gemm_rows=False, cpu_gemm_fit=False)):
        old = blocking_of(T.schedule(func, AVX2))
    assert new.algorithm == old.algorithm == "gemm-1x1"
    assert new.block_shape["pixels"] == 16 and old.block_shape["pixels"] == 24


@st.composite
def pointwise_cases(draw):
    h, w = draw(st.integers(1, 15)), draw(st.integers(1, 15))
    return dict(x=(draw(st.integers(1, 2)), draw(st.integers(1, 40)), h, w),
                oc=draw(st.integers(1, 70)),
                strides=draw(st.sampled_from([(1, 1), (2, 2)])),
                bias_relu=draw(st.booleans()))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=pointwise_cases(), fit=st.booleans(), rows=st.booleans())
def test_both_tiles_equal_the_reference(case, fit, rows):
    x, oc = case.pop("x"), case.pop("oc")
    func = T.conv2d_func(x, (oc, x[1], 1, 1), **case)
    with use_variants(KernelVariants(cpu_gemm="always", cpu_gemm_fit=fit, cpu_gemm_rows=rows)):
        assert T.check_cpu(func, AVX2) <= TOL


def test_the_predictor_mirror_counts_the_tile_its_samples_ran():
    """A predictor file from before the field (the shipped one) mirrors the unfitted tile;
    one of newer samples, the fitted one."""
    old = dataclasses.replace(reference(), lanes=16)
    assert old.vector_regs == 32
    assert not old.variants.cpu_gemm_fit
    new = dataclasses.replace(old, variants=KernelVariants())
    spec = OpSpec("conv2d", 7, 7, 960, 160)
    c = pointwise(960, 160, 7, 7)
    assert kernel("cpu", spec, old).num_blocks == tiling.gemm_tasks(c, old, fit=False,
                                                                   rows=False)
    assert kernel("cpu", spec, new).num_blocks == tiling.gemm_tasks(c, new, fit=True)
    assert kernel("cpu", spec, new).num_blocks != kernel("cpu", spec, old).num_blocks
