"""A CPU kernel's write-out loop is vectorised in pieces (``KernelVariants.cpu_vector_tails``):
whole vectors, then power-of-two tails, where the vector width does not divide it. Kernels
equal the unscheduled PrimFunc on awkward shapes (one-column and one-row outputs, odd widths,
stride 2, depthwise and dense, prepacked), keep their rule, and stay TIR a new ``Schedule``
takes."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from tvm import tirx
from tvm.s_tir import Schedule

from codl_tvm.schedules import blocking_of, prepack
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.analysis import analyze
from codl_tvm.schedules.dispatch import RULES
from codl_tvm.schedules.target_info import target_info
from codl_tvm.schedules.vectors import pieces
from codl_tvm.tiling import KernelVariants, use_variants

TOL = 1e-5
ONE_CORE = {"kind": "llvm", "num-cores": 1}
AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}


@given(extent=st.integers(1, 4000), lanes=st.sampled_from([4, 8, 16]))
def test_pieces_cover_the_loop_in_whole_vectors_then_halving_tails(extent, lanes):
    got = pieces(extent, lanes)
    assert sum(got) == extent
    tails = got[1:] if got[0] >= lanes else got
    assert got[0] % lanes == 0 or got[0] < lanes
    assert all(p < lanes and p & (p - 1) == 0 for p in tails)
    assert tails == sorted(tails, reverse=True) and len(set(tails)) == len(tails)


def write_out_loops(func: tirx.PrimFunc) -> list[tirx.For]:
    """The innermost loops around the stores to the PrimFunc's output."""
    from codl_tvm.schedules.gpu_rules import _children

    out = func.params[-1].name

    def stores_out(stmt) -> bool:
        if isinstance(stmt, tirx.BufferStore):
            return stmt.buffer.name == out
        return any(stores_out(c) for c in _children(stmt))

    found, stack = [], [func.body]
    while stack:
        stmt = stack.pop()
        kids = _children(stmt)
        if isinstance(stmt, tirx.For) and stores_out(stmt) and not any(
                isinstance(k, tirx.For) or _has_loop(k) for k in kids):
            found.append(stmt)
        stack.extend(kids)
    return found


def _has_loop(stmt) -> bool:
    from codl_tvm.schedules.gpu_rules import _children

    return isinstance(stmt, tirx.For) or any(_has_loop(c) for c in _children(stmt))


def test_a_14_column_depthwise_row_is_written_in_vectors_of_8_4_and_2():
    func = T.conv2d_func((1, 32, 14, 14), (32, 1, 3, 3), groups=32, padding=1, bias_relu=True)
    new = T.schedule(func, AVX512)
    assert blocking_of(new).rule == "cpu-grouped-conv2d"
    loops = write_out_loops(new)
    assert sorted(int(lp.extent) for lp in loops) == [2, 4, 8]
    assert all(lp.kind == tirx.ForKind.VECTORIZED for lp in loops)
    with use_variants(KernelVariants(cpu_vector_tails=False)):
        (serial,) = write_out_loops(T.schedule(func, AVX512))
    assert serial.kind == tirx.ForKind.SERIAL and int(serial.extent) == 14


def test_a_1x1_gemm_writes_its_14_column_rows_in_vectors():
    func = T.conv2d_func((1, 64, 14, 14), (48, 64, 1, 1), bias_relu=True)
    new = T.schedule(func, AVX512)
    assert blocking_of(new).rule == "cpu-conv2d-gemm-1x1"
    assert sorted(int(lp.extent) for lp in write_out_loops(new)) == [2, 4, 8]


def test_a_row_shorter_than_half_a_vector_is_left_as_it_is():
    """7 columns on 16 lanes: in pieces of 4, 2 and 1 the depthwise conv ran 1.07x slower."""
    func = T.conv2d_func((1, 32, 7, 7), (32, 1, 3, 3), groups=32, padding=1)
    (loop,) = write_out_loops(T.schedule(func, AVX512))
    assert loop.kind == tirx.ForKind.SERIAL and int(loop.extent) == 7


@st.composite
def convs(draw):
    depthwise = draw(st.booleans())
    c = draw(st.integers(1, 20))
    oc = c if depthwise else draw(st.integers(1, 40))
    k, stride = draw(st.sampled_from([(1, 1), (3, 1), (3, 2)] if depthwise else [(1, 1), (3, 2)]))
    h, w = draw(st.integers(k, 12)), draw(st.integers(k, 40))
    return dict(x=(1, c, h, w), w=(oc, 1 if depthwise else c, k, k), strides=stride,
                padding=k // 2 if draw(st.booleans()) else 0, groups=c if depthwise else 1,
                bias_relu=draw(st.booleans()))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=convs(), target=st.sampled_from([ONE_CORE, T.CPU_TARGET]))
def test_kernels_with_vector_tails_equal_the_reference(case, target):
    x, w = case.pop("x"), case.pop("w")
    func = T.conv2d_func(x, w, **case)
    with use_variants(KernelVariants(cpu_vector_tails=False)):
        rule = blocking_of(T.schedule(func, target)).rule
    assert T.check_cpu(func, target) <= TOL
    new = T.schedule(func, target)
    assert blocking_of(new).rule == rule  # no fallback
    Schedule(new)  # well-formed: a partition of a fused loop bound its variables twice


def test_the_prepacked_kernel_vectorises_its_write_out_too():
    func = T.with_target(T.conv2d_func((1, 24, 14, 14), (40, 24, 1, 1), bias_relu=True), AVX512)
    (row,) = [r for r in RULES if r.name == "cpu-conv2d-gemm-1x1"]
    with prepack.capture() as box:
        row.apply(func, analyze(func), func.attrs["target"], target_info(func.attrs["target"]),
                  row.name)
    assert sorted(int(lp.extent) for lp in write_out_loops(box["kernel"])) == [2, 4, 8]
    Schedule(box["kernel"])


@pytest.mark.parametrize("m, n, target", [
    (3, 24, {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}),  # the tail inside a vector
    (1, 1000, AVX512), (2, 1008, AVX512), (5, 37, ONE_CORE),
])  # fmt: skip
def test_a_matmul_whose_tail_part_the_pieces_straddle_equals_the_reference(m, n, target):
    """The unpack picks each column from the main part or the tail part; where a piece of
    whole vectors crosses the boundary, TVM reads that piece element by element, and the
    result stays exact."""
    func = T.matmul_func(m, 64, n, bias_relu=True)
    assert T.check_cpu(func, target) <= TOL
