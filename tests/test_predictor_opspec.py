"""OpSpec geometry: parts of H and OC splits tile the op exactly, halos at true borders."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codl_tvm.predictor.opspec import OpSpec


@st.composite
def window_ops(draw):
    k = draw(st.sampled_from([1, 2, 3, 5, 7]))
    s = draw(st.sampled_from([1, 2]))
    d = draw(st.sampled_from([1, 2])) if k > 1 else 1
    h = draw(st.integers(d * (k - 1) + 1, 40))
    p = draw(st.integers(0, k // 2))
    kind = draw(st.sampled_from(["conv2d", "depthwise", "pool_max", "pool_avg"]))
    c = draw(st.integers(1, 16))
    oc = c if kind != "conv2d" else draw(st.integers(1, 16))
    groups = c if kind == "depthwise" else 1
    return OpSpec(kind, h, h, c, oc, k, k, s, s, (p, p, p, p), d, groups)


@settings(max_examples=200, deadline=None)
@given(window_ops(), st.floats(0, 1), st.sampled_from(["H", "OC"]))
def test_parts_tile_the_output(op, ratio, dim):
    gpu, cpu = op.part("gpu", dim, ratio), op.part("cpu", dim, ratio)
    assert gpu is not None or cpu is not None
    if dim == "H":
        rows = sum(p.out_h for p in (gpu, cpu) if p is not None)
        assert rows == op.out_h
        for p in (gpu, cpu):
            if p is not None:
                assert p.out_w == op.out_w and p.OC == op.OC and p.H <= op.H
                assert p.pad[0] <= op.pad[0] and p.pad[2] <= op.pad[2]
    else:
        assert sum(p.OC for p in (gpu, cpu) if p is not None) == op.OC
    total = sum(p.out_elems for p in (gpu, cpu) if p is not None)
    assert total == op.out_elems


def test_bad_specs():
    with pytest.raises(ValueError, match="unknown op kind 'lstm'"):
        OpSpec("lstm", 1, 1, 1, 1)
    with pytest.raises(ValueError, match="dense cannot be split on 'H'"):
        OpSpec("dense", 1, 1, 8, 8).part("gpu", "H", 0.5)
    with pytest.raises(ValueError, match="outside"):
        OpSpec("dense", 1, 1, 8, 8).part("gpu", "OC", 1.5)


def test_flops():
    op = OpSpec("conv2d", 8, 8, 4, 16, 3, 3, pad=(1, 1, 1, 1))
    assert op.flops == 2 * 8 * 8 * 16 * 4 * 9
    assert OpSpec("dense", 1, 1, 100, 10).flops == 2000
