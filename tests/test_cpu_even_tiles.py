"""The register tiles of the CPU's direct conv and Winograd share a row's columns or an
image's tiles evenly among their blocks (``KernelVariants.cpu_even_tiles``): as many blocks as
before, none padded more than the last block needs; the schedules run the tile the rule names
and equal the unscheduled PrimFunc; the predictor prices what its samples ran."""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from codl_tvm import tiling
from codl_tvm.predictor.cpu_terms import cpu_conv, cpu_winograd
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.mirror import kernel
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.tiling import ConvShape, KernelVariants, use_variants

TOL = 1e-5
WINOGRAD, DIRECT = "cpu-conv2d-winograd", "cpu-conv2d-direct-nchwc"


class Cpu(NamedTuple):
    lanes: int
    vector_regs: int
    cores: int


AVX512, AVX2 = Cpu(16, 32, 16), Cpu(8, 16, 2)


def conv3x3(ic: int, oc: int, h: int, w: int) -> ConvShape:
    return ConvShape(1, ic, oc, h, w, 3, 3)


def test_a_7x7_image_on_32_registers_is_two_blocks_of_8():
    c = conv3x3(512, 512, 7, 7)  # 16 tiles of 2x2
    assert tiling.winograd_tiles(c, AVX512, even=True) == (32, 8)
    assert tiling.winograd_tiles(c, AVX512, even=False) == (32, 14)
    assert tiling.winograd_tasks(c, AVX512, True) == tiling.winograd_tasks(c, AVX512, False)
    with use_variants(KernelVariants(cpu_even_tiles=False)):
        assert tiling.winograd_tiles(c, AVX512) == (32, 14)
    assert tiling.winograd_tiles(c, AVX512) == (32, 8)  # the default


def test_7_columns_on_16_registers_are_two_blocks_of_4():
    c = ConvShape(1, 256, 512, 7, 7, 3, 3)
    assert tiling.direct_tiles(c, AVX2, even=True) == (16, 4)
    assert tiling.direct_tiles(c, AVX2, even=False) == (16, 6)
    assert tiling.direct_tasks(c, AVX2, True) == tiling.direct_tasks(c, AVX2, False)
    assert tiling.direct_tiles(ConvShape(1, 3, 32, 112, 112, 3, 3), AVX2) == (16, 6)  # 19 x 6


@settings(max_examples=200, deadline=None)
@given(w=st.integers(1, 240), oc=st.sampled_from([8, 16, 64, 96]),
       cpu=st.sampled_from([AVX512, AVX2, Cpu(4, 16, 2)]))
def test_even_columns_keep_the_blocks_and_pad_less_than_a_block(w, oc, cpu):
    c = ConvShape(1, 16, oc, 3, w, 3, 3)
    (ocb, even), (ocb_old, old) = (tiling.direct_tiles(c, cpu, flag) for flag in (True, False))
    assert ocb == ocb_old and 1 <= even <= old
    blocks = math.ceil(w / old)
    assert math.ceil(w / even) == blocks and even * blocks - w < blocks
    assert tiling.direct_tasks(c, cpu, True) == tiling.direct_tasks(c, cpu, False)


@settings(max_examples=200, deadline=None)
@given(h=st.integers(1, 120), w=st.integers(1, 120), oc=st.sampled_from([8, 16, 64, 96]),
       cpu=st.sampled_from([AVX512, AVX2, Cpu(4, 16, 2)]))
def test_even_tiles_keep_the_blocks_and_pad_less_than_a_block(h, w, oc, cpu):
    c = conv3x3(64, oc, h, w)
    tiles = math.prod(tiling.winograd_grid(c))
    (ocb, even), (ocb_old, old) = (tiling.winograd_tiles(c, cpu, flag) for flag in (True, False))
    assert ocb == ocb_old and 1 <= even <= old
    blocks = math.ceil(tiles / old)
    assert math.ceil(tiles / even) == blocks  # the same tasks
    assert even * blocks - tiles < blocks  # at most one zero tile per block
    assert tiling.winograd_tasks(c, cpu, True) == tiling.winograd_tasks(c, cpu, False)


# images whose tiles the generic x86 target (4 lanes, 16 registers: 6 tiles a block) now
# shares evenly: 7 tiles are 4 + 3 (was 6 + 1 and 5 of zeros), 13 are 5 + 5 + 3
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from([(2, 14), (14, 2), (2, 26), (5, 6), (4, 7), (6, 6), (3, 9)]),
       oc=st.sampled_from([64, 72]))
def test_the_schedule_runs_the_even_tile_and_equals_the_reference(shape, oc):
    h, w = shape
    func = T.conv2d_func((1, 64, h, w), (oc, 64, 3, 3), padding=1, bias_relu=True)
    sched = T.schedule(func, T.CPU_TARGET)
    b = blocking_of(sched)
    assert b.rule == WINOGRAD
    c = conv3x3(64, oc, h, w)
    even, old = (tiling.winograd_tiles(c, Cpu(b.vector_lanes, 16, 2), f)[1] for f in (1, 0))
    assert b.block_shape["tiles"] == even < old
    assert T.check_cpu(func) <= TOL
    with use_variants(KernelVariants(cpu_even_tiles=False)):
        assert blocking_of(T.schedule(func, T.CPU_TARGET)).block_shape["tiles"] == old
        assert T.check_cpu(func) <= TOL


# direct convs whose output columns the generic x86 target (6 columns a block) now shares
# evenly: 7 are 4 + 3, 13 are 5 + 5 + 3, 14 are 5 + 5 + 4; stride 2, 1x1 stride 2 (a sampled
# copy), a 5x5 window and a depthwise-free 3x3 stride 1 below 64 channels
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from([
    ((1, 16, 14, 14), (40, 16, 3, 3), 2, 1), ((1, 8, 28, 27), (24, 8, 3, 3), 2, 1),
    ((1, 16, 14, 14), (32, 16, 1, 1), 2, 0), ((1, 4, 9, 13), (12, 4, 5, 5), 1, 2),
    ((1, 32, 5, 14), (48, 32, 3, 3), 1, 1), ((1, 3, 2, 26), (8, 3, 3, 3), 2, 1)]))
def test_the_direct_conv_runs_the_even_tile_and_equals_the_reference(case):
    x, w, stride, pad = case
    func = T.conv2d_func(x, w, strides=(stride, stride), padding=(pad,) * 4, bias_relu=True)
    b = blocking_of(T.schedule(func, T.CPU_TARGET))
    assert b.rule == DIRECT
    ow = (x[3] + 2 * pad - w[3]) // stride + 1
    c = ConvShape(1, x[1], w[0], 1, ow, w[2], w[3])
    even, old = (tiling.direct_tiles(c, Cpu(b.vector_lanes, 16, 2), f)[1] for f in (1, 0))
    assert b.block_shape["w"] == even < old
    assert T.check_cpu(func) <= TOL
    with use_variants(KernelVariants(cpu_even_tiles=False)):
        assert blocking_of(T.schedule(func, T.CPU_TARGET)).block_shape["w"] == old
        assert T.check_cpu(func) <= TOL


def test_the_predictor_prices_the_tile_its_samples_ran():
    old = dataclasses.replace(reference(), lanes=16)  # AVX-512: 14 tiles a block before
    assert not old.variants.cpu_even_tiles  # the shipped file predates the variant
    new = dataclasses.replace(old, variants=dataclasses.replace(
        old.variants, cpu_even_tiles=True, cpu_winograd_64x64=True))
    spec = OpSpec("conv2d", 7, 7, 512, 512, 3, 3, 1, 1, pad=(1, 1, 1, 1))
    assert kernel("cpu", spec, old).algorithm == kernel("cpu", spec, new).algorithm
    assert kernel("cpu", spec, old).num_blocks == kernel("cpu", spec, new).num_blocks
    fmas_old, fmas_new = cpu_winograd(spec, old)[0], cpu_winograd(spec, new)[0]
    assert fmas_new / fmas_old == 8 / 14  # the critical core's FMAs: 8 tiles a task, not 14
    direct = OpSpec("conv2d", 14, 14, 256, 512, 3, 3, 2, 2, pad=(1, 1, 1, 1))  # 7 columns
    old, new = (dataclasses.replace(m, lanes=8) for m in (old, new))  # AVX2: 6 a block before
    assert kernel("cpu", direct, old).num_blocks == kernel("cpu", direct, new).num_blocks
    assert cpu_conv(direct, new)[0] / cpu_conv(direct, old)[0] == 8 / 12
