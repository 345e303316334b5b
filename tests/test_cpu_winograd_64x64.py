"""The CPU's Winograd takes 3x3 stride-1 convs of 64 to 64 channels
(``KernelVariants.cpu_winograd_64x64``): the dispatch picks it where both sides have at least
64 channels, the predictor's mirror follows the variants its samples were built with, and the
kernel equals the unscheduled PrimFunc on such shapes (odd sizes, one-row images)."""

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
from codl_tvm.tiling import ConvShape, KernelVariants, use_variants

TOL = 1e-5
WINOGRAD = "cpu-conv2d-winograd"


def conv3x3(ic: int, oc: int, hw: int) -> ConvShape:
    return ConvShape(1, ic, oc, hw, hw, 3, 3)


def test_64_to_64_channels_take_winograd_and_fewer_do_not():
    assert tiling.winograd_wins(conv3x3(64, 64, 56))
    assert not tiling.winograd_wins(conv3x3(64, 64, 56), narrow=False)
    assert tiling.winograd_wins(conv3x3(64, 128, 56), narrow=False)  # as before
    for ic, oc in ((32, 64), (64, 32), (3, 64)):
        assert not tiling.winograd_wins(conv3x3(ic, oc, 56))
    with use_variants(KernelVariants(cpu_winograd_64x64=False)):
        assert not tiling.winograd_wins(conv3x3(64, 64, 56))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(1, 17), w=st.integers(1, 17), oc=st.sampled_from([64, 72]))
def test_the_dispatch_runs_winograd_and_it_equals_the_reference(h, w, oc):
    func = T.conv2d_func((1, 64, h, w), (oc, 64, 3, 3), padding=1, bias_relu=True)
    assert blocking_of(T.schedule(func, T.CPU_TARGET)).rule == WINOGRAD
    assert T.check_cpu(func) <= TOL
    with use_variants(KernelVariants(cpu_winograd_64x64=False)):
        assert blocking_of(T.schedule(func, T.CPU_TARGET)).rule != WINOGRAD


def test_the_predictor_mirrors_the_variant_of_its_samples():
    old = reference()  # the shipped file's samples ran 64->64 on the direct conv
    assert not old.variants.cpu_winograd_64x64
    new = dataclasses.replace(old, variants=dataclasses.replace(old.variants,
                                                                cpu_winograd_64x64=True))
    spec = OpSpec("conv2d", 56, 56, 64, 64, 3, 3, 1, 1, pad=(1, 1, 1, 1))
    assert kernel("cpu", spec, old).algorithm == "direct-nchwc"
    assert kernel("cpu", spec, new).algorithm == "winograd-2x2-3x3"
