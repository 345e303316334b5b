"""The direct conv of a 1x1 window at stride > 1 samples its input in the pad pass
(``cpu_conv.sampled_input``) and runs at stride 1 over the samples: equal to the
unscheduled PrimFunc (rel. err <= 1e-5) on awkward shapes, and its pad pass writes OH rows of
whole column tiles, not the padded input."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
import tvm
from hypothesis import HealthCheck, example, given, settings
from tvm.s_tir import Schedule

from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.analysis import analyze
from codl_tvm.schedules.cpu_conv import conv_tiles
from codl_tvm.schedules.target_info import target_info

TOL = 1e-5
AVX512 = T.AVX512_TARGET  # kernels built for it run as T.runnable_here has them
TARGETS = [AVX512, T.CPU_TARGET]  # AVX-512 lanes (or this host's widest) and the SSE default
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def pointwise(draw) -> dict:
    """1x1 convs at strides 1-3 on each axis (one of them > 1), any padding, tiny planes,
    one-row and one-column outputs, OC around the channel block."""
    sh, sw = draw(st.sampled_from([(2, 2), (2, 1), (1, 2), (3, 3), (3, 2)]))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h, w = draw(st.integers(1, 12)), draw(st.integers(1, 33))
    ic, oc = draw(st.integers(1, 9)), draw(st.sampled_from([1, 5, 16, 17, 33]))
    return dict(x=(1, ic, h, w), w=(oc, ic, 1, 1), strides=(sh, sw), padding=pads,
                bias_relu=draw(st.booleans()))  # fmt: skip


def _pad_shape(func) -> tuple[int, ...]:
    sch = Schedule(func)
    return tuple(int(v) for v in sch.get(sch.get_sblock("codl_pad")).writes[0].source.shape)


@pytest.mark.parametrize("target", TARGETS, ids=["avx512", "sse"])
@SETTINGS
@given(case=pointwise())
@example(case=dict(x=(1, 3, 17, 17), w=(40, 3, 1, 1), strides=(2, 2), padding=(0,) * 4,
                   bias_relu=False))  # fmt: skip
@example(case=dict(x=(1, 2, 2, 31), w=(33, 2, 1, 1), strides=(2, 2), padding=(0,) * 4,
                   bias_relu=True))  # one output row, 16 columns: two tiles (8 + 8 on AVX-512)
@example(case=dict(x=(1, 4, 4, 4), w=(8, 4, 1, 1), strides=(2, 2), padding=(2, 0, 0, 2),
                   bias_relu=False))  # padding wider than the sampled part
def test_sampled_1x1_equals_the_unsplit_conv(case, target):
    attrs = {k: v for k, v in case.items() if k not in ("x", "w")}  # examples are shared
    func = T.conv2d_func(case["x"], case["w"], **attrs)
    new = T.schedule(func, target)
    assert blocking_of(new).algorithm == "direct-nchwc"
    c = analyze(func).conv
    _, xt = conv_tiles(c, target_info(tvm.target.Target(target)))
    assert _pad_shape(new) == (1, c.ic, c.oh, math.ceil(c.ow / xt) * xt)
    assert T.check_cpu(func, target) <= TOL


def test_a_kxk_window_keeps_the_padded_copy():
    """Only 1x1 windows sample: a 3x3 at stride 2 reads overlapping rows of the copy."""
    func = T.conv2d_func((1, 8, 17, 17), (40, 8, 3, 3), strides=(2, 2), padding=(1,) * 4)
    new = T.schedule(func, AVX512)
    assert _pad_shape(new) == (1, 8, 19, 19)  # (OH - 1) * 2 + 3 rows and columns, OH = OW = 9
    assert T.check_cpu(func, AVX512) <= TOL
