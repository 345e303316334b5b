"""The CPU 1x1 GEMM's register tile on 16 vector registers (``KernelVariants.cpu_gemm_rows``):
2 pixel vectors by up to 6 output channels where 3 by 3 was before; 32 registers keep 3
vectors. The kernel equals the unscheduled PrimFunc both ways on awkward shapes (pixel tails,
OC that no tile height divides, one-row images, stride 2 under ``cpu_gemm=always``), and the
predictor's mirror counts the tasks of the tile its samples ran."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from codl_tvm import tiling
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.mirror import kernel
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.tiling import KernelVariants, use_variants
from codl_tvm.tiling.common import Simd
from tests.helpers import AVX2, Regs, pointwise

TOL = 1e-5


def test_sixteen_registers_get_six_rows_of_two_vectors():
    avx2: Simd = Regs(8, 16)
    c = pointwise(96, 576, 14, 14)
    assert tiling.gemm_tiles(c, avx2, rows=True, fit=False) == (6, 2)  # 12 accumulators
    assert tiling.gemm_tiles(c, avx2, rows=False, fit=False) == (3, 3)  # 9
    odd = pointwise(960, 160, 7, 7)  # 160 = 5 x 32: the least padding is 5 rows, none
    assert tiling.gemm_tiles(odd, avx2, rows=True, fit=False) == (5, 2)


def test_thirty_two_registers_keep_three_vectors():
    avx512: Simd = Regs(16, 32)
    c = pointwise(96, 576, 14, 14)
    assert tiling.gemm_tiles(c, avx512, rows=True) == tiling.gemm_tiles(c, avx512, rows=False)
    assert tiling.gemm_tiles(c, avx512, fit=False)[1] == 3


def test_the_schedule_follows_the_variant():
    func = T.conv2d_func((1, 96, 14, 14), (576, 96, 1, 1))
    new = blocking_of(T.schedule(func, AVX2))
    with use_variants(KernelVariants(cpu_gemm_rows=False)):
        old = blocking_of(T.schedule(func, AVX2))
    assert new.algorithm == old.algorithm == "gemm-1x1"
    assert new.block_shape == {"oc": 6, "pixels": 16}
    assert old.block_shape == {"oc": 3, "pixels": 24}


@st.composite
def pointwise_cases(draw):
    h, w = draw(st.integers(1, 15)), draw(st.integers(1, 15))
    return dict(x=(1, draw(st.integers(1, 40)), h, w), w=(draw(st.integers(1, 70)), 0, 1, 1),
                strides=draw(st.sampled_from([(1, 1), (2, 2)])),
                bias_relu=draw(st.booleans()))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=pointwise_cases(), rows=st.booleans())
def test_both_tiles_equal_the_reference(case, rows):
    x, w = case.pop("x"), case.pop("w")
    func = T.conv2d_func(x, (w[0], x[1], 1, 1), **case)
    with use_variants(KernelVariants(cpu_gemm="always", cpu_gemm_rows=rows)):
        assert T.check_cpu(func, AVX2) <= TOL


def test_the_predictor_mirror_counts_the_tile_its_samples_ran():
    """A predictor file from before the field (the shipped one) mirrors 3 x 3 on a machine
    of 16 registers; one of newer samples, 6 x 2."""
    old = dataclasses.replace(reference(), lanes=8)
    assert old.vector_regs == 16 and not old.variants.cpu_gemm_rows
    new = dataclasses.replace(old, variants=KernelVariants())
    spec = OpSpec("conv2d", 14, 14, 96, 576)
    c = pointwise(96, 576, 14, 14)
    assert kernel("cpu", spec, old).num_blocks == tiling.gemm_tasks(c, old, rows=False)
    assert kernel("cpu", spec, new).num_blocks == tiling.gemm_tasks(c, new, rows=True)
    assert kernel("cpu", spec, new).num_blocks != kernel("cpu", spec, old).num_blocks
