"""The CPU's strided grouped/depthwise conv reads a phased input
(``KernelVariants.cpu_depthwise_phases``): each padded row holds its columns ``j*s + p`` at
``[p, j]``, so every window column loads whole vectors, and the pad's column loop is cut so
that its middle part is a plain copy. It equals the unscheduled PrimFunc on awkward shapes
(strides 2 and 3, dilation, odd widths, one-column outputs, wide and one-sided padding,
groups), and the predictor prices a phased kernel's window steps as contiguous ones."""

from __future__ import annotations

import dataclasses
import re

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from codl_tvm.predictor import cpu_terms
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.tiling import KernelVariants, use_variants

TOL = 1e-5
ONE_CORE = {"kind": "llvm", "num-cores": 1}


def pad_shape(func) -> tuple[int, ...]:
    (buf,) = [b for b in func.body.block.alloc_buffers if b.name == "codl_pad"]
    return tuple(int(d) for d in buf.shape)


@st.composite
def strided_cases(draw):
    groups = draw(st.integers(1, 6))
    icg, mult = draw(st.sampled_from([(1, 1), (1, 2), (2, 1)]))
    kh, kw = draw(st.sampled_from([(3, 3), (5, 5), (1, 3), (3, 1), (2, 2)]))
    sh, sw = draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([2, 3]))
    dil = draw(st.sampled_from([1, 2]))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h = draw(st.integers(max(1, dil * (kh - 1) + 1 - pads[0] - pads[2]), 20))
    w = draw(st.integers(max(1, dil * (kw - 1) + 1 - pads[1] - pads[3]), 40))
    return dict(x=(1, groups * icg, h, w), w=(groups * icg * mult, icg, kh, kw),
                strides=(sh, sw), dilation=(dil, dil), padding=pads, groups=groups,
                bias_relu=draw(st.booleans()))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=strided_cases(), target=st.sampled_from([ONE_CORE, T.CPU_TARGET]),
       blocks=st.booleans())
def test_phased_input_equals_the_reference(case, target, blocks):
    x, w = case.pop("x"), case.pop("w")
    func = T.conv2d_func(x, w, **case)
    with use_variants(KernelVariants(cpu_depthwise_blocks=blocks)):
        assert T.check_cpu(func, target) <= TOL
        if case["groups"] > 1:  # one group is a dense conv, another rule's
            assert blocking_of(T.schedule(func, target)).rule == "cpu-grouped-conv2d"
    with use_variants(KernelVariants(cpu_depthwise_phases=False, cpu_depthwise_blocks=blocks)):
        assert T.check_cpu(func, target) <= TOL


def test_a_strided_conv_pads_into_phases_and_a_unit_stride_does_not():
    strided = T.conv2d_func((1, 8, 28, 28), (8, 1, 3, 3), groups=8, padding=1, strides=2)
    # 14 output columns in 2 vectors of 8: 16 + 1 columns per phase, 2 phases per row
    assert pad_shape(T.schedule(strided, ONE_CORE))[-2:] == (2, 17)
    with use_variants(KernelVariants(cpu_depthwise_phases=False)):
        assert len(pad_shape(T.schedule(strided, ONE_CORE))) == 4
    plain = T.conv2d_func((1, 8, 28, 28), (8, 1, 3, 3), groups=8, padding=1)
    assert len(pad_shape(T.schedule(plain, ONE_CORE))) == 4


def test_a_window_of_one_column_reads_one_phase():
    """Regression: a 1-wide window at column stride 2 reads phase 0 only, so the task's pad
    loops have a unit phase loop (it was dropped, and the grouped rule fell back)."""
    for x, w in (((1, 2, 1, 1), (2, 1, 1, 1)), ((1, 4, 6, 9), (4, 1, 3, 1))):
        func = T.conv2d_func(x, w, strides=(1, 2), groups=x[1])
        assert T.check_cpu(func, ONE_CORE) <= TOL
        assert blocking_of(T.schedule(func, ONE_CORE)).rule == "cpu-grouped-conv2d"


def test_the_pad_copies_its_middle_columns_without_a_condition():
    """The column loop of the task's pad is cut in three: left padding, the columns every
    phase reads from the input, the rest."""
    func = T.conv2d_func((1, 8, 28, 28), (8, 1, 3, 3), groups=8, padding=1, strides=2)
    text = T.schedule(func, ONE_CORE).script()
    assert len(re.findall(r'T.sblock\("codl_pad_ax\d+"\)', text)) == 3


def test_the_predictor_prices_phased_steps_as_contiguous_ones():
    old = reference()  # the shipped file's samples ran the strided kernel
    assert not old.variants.cpu_depthwise_phases
    new = dataclasses.replace(old, variants=dataclasses.replace(old.variants,
                                                                cpu_depthwise_phases=True))
    spec = OpSpec("depthwise", 112, 112, 96, 96, 3, 3, 2, 2, pad=(1, 1, 1, 1), groups=96)
    contiguous, strided, *rest = cpu_terms.cpu_depthwise(spec, old)
    assert contiguous == 0 and strided > 0
    contiguous_new, strided_new, *rest_new = cpu_terms.cpu_depthwise(spec, new)
    assert (contiguous_new, strided_new) == (strided, 0) and rest_new == rest
