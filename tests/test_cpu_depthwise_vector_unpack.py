"""The CPU's grouped/depthwise conv writes a task's output rows in SIMD vectors
(``KernelVariants.cpu_depthwise_vector_unpack``), the last vector of a row masked where the
row fills no whole one. It equals the unscheduled PrimFunc on awkward shapes (one column,
rows of one vector and one lane more, strides 1 to 3, dilation, groups of several channels,
wide and one-sided padding, a ReLU and bias inlined into the write-out), and without the
variant the write-out is the column loop it was."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings
from tvm import s_tir, tirx

from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.analysis import leaf_blocks
from codl_tvm.tiling import KernelVariants, use_variants
from tests.helpers import AVX2

TOL = 1e-5
GROUPED = "cpu-grouped-conv2d"


def unpack_loops(func: tirx.PrimFunc) -> list[tirx.For]:
    """The loops around the write-out block, outermost first."""
    def walk(stmt, path):
        if isinstance(stmt, tirx.For):
            return walk(stmt.body, [*path, stmt])
        if isinstance(stmt, s_tir.SBlockRealize):
            if stmt.block.name_hint == "codl_unpack":
                return path
            return walk(stmt.block.body, path)
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                if (found := walk(s, path)) is not None:
                    return found
        return None

    return walk(func.body, []) or []


def test_a_row_of_14_is_written_in_two_vectors_of_8_the_second_masked():
    func = T.conv2d_func((1, 32, 14, 14), (32, 1, 3, 3), padding=1, groups=32, bias_relu=True)
    new = T.schedule(func, AVX2)
    assert blocking_of(new).rule == GROUPED
    loops = unpack_loops(new)
    assert int(loops[-1].kind) == int(tirx.ForKind.VECTORIZED) and int(loops[-1].extent) == 8
    assert int(loops[-2].extent) == 2  # 14 columns: 8 + 6 under the split's predicate
    assert leaf_blocks(new)  # TIR that a new Schedule accepts
    with use_variants(KernelVariants(cpu_depthwise_vector_unpack=False)):
        old = unpack_loops(T.schedule(func, AVX2))
    assert int(old[-1].kind) == int(tirx.ForKind.SERIAL) and int(old[-1].extent) == 14


@st.composite
def grouped_cases(draw):
    groups = draw(st.integers(2, 6))
    icg, mult = draw(st.sampled_from([(1, 1), (1, 2), (2, 1)]))
    k = draw(st.sampled_from([1, 3, 5]))
    stride, dil = draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([1, 2]))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dil * (k - 1) + 1 - pads[0] - pads[2]), 18))
    w = draw(st.integers(max(1, dil * (k - 1) + 1 - pads[1] - pads[3]), 18))
    return dict(x=(1, groups * icg, h, w), w=(groups * mult, icg, k, k), strides=stride,
                padding=pads, dilation=dil, groups=groups)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=grouped_cases(), target=st.sampled_from([AVX2, T.CPU_TARGET]))
def test_the_vector_write_out_equals_the_reference(case, target):
    x, w = case.pop("x"), case.pop("w")
    func = T.conv2d_func(x, w, bias_relu=True, **case)
    rule = blocking_of(T.schedule(func, target)).rule
    assert rule == GROUPED, rule
    assert T.check_cpu(func, target) <= TOL
