"""A split conv2d_transpose equals the unsplit one (relative error <= 1e-5) on the cpu-pair.

By output channels, each part is the op with a slice of the weight's output channels (IOHW
axis 1). By rows, each part is a conv2d_transpose over the input rows its output rows read,
with the paddings and output padding that put its first row and last row where the unsplit
op has them (:func:`codl_tvm.split_rules.transposed_row_padding`).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import const, conv, single_function
from hypothesis import example, given
from hypothesis import strategies as st
from test_equivalence import RATIOS, SETTINGS, check
from tvm.relax import op as rop

import codl_tvm
from codl_tvm import Chain, OpPlacement, Plan
from codl_tvm.geometry import RowPart, TransposedWindow, chain_row_parts
from codl_tvm.split_rules import transposed_row_padding


def transposed(bb, x, rng, oc: int, k: int, stride: int, pad, out_pad: int, bias: bool):
    ic = int(x.ty.shape[1])
    y = bb.emit(rop.nn.conv2d_transpose(x, const(rng, (ic, oc, k, k)), strides=stride,
                                        padding=pad, output_padding=(out_pad, out_pad)))
    if bias:
        y = bb.emit(rop.nn.relu(bb.emit(rop.add(y, const(rng, (1, oc, 1, 1))))))
    return y


@st.composite
def transposed_case(draw):
    k = draw(st.integers(1, 5))
    stride = draw(st.integers(1, 3))  # past the kernel: left whole, still equal
    pad = tuple(draw(st.integers(0, k - 1)) for _ in range(4))
    out_pad = draw(st.integers(0, stride - 1))
    h, w = draw(st.integers(1, 9)), draw(st.integers(1, 5))
    out_h = (h - 1) * stride - pad[0] - pad[2] + k + out_pad
    out_w = (w - 1) * stride - pad[1] - pad[3] + k + out_pad
    if min(out_h, out_w) < 1:
        pad = (0, 0, 0, 0)
    return dict(shape=(1, draw(st.integers(1, 4)), h, w), oc=draw(st.integers(1, 7)), k=k,
                stride=stride, pad=pad, out_pad=out_pad, bias=draw(st.booleans()))


@SETTINGS
@given(case=transposed_case(), dim=st.sampled_from(["H", "OC"]), ratio=RATIOS)
@example(case=dict(shape=(1, 8, 6, 8), oc=4, k=3, stride=2, pad=(1, 1, 1, 1), out_pad=1,
                   bias=True), dim="H", ratio=0.9)  # fast-style-transfer's upsampling, 1-row part
def test_conv2d_transpose_split_equals_unsplit(case, dim, ratio):
    rng = np.random.default_rng(7)
    case = dict(case)
    shape = case.pop("shape")
    mod = codl_tvm.load_model(single_function(shape, lambda bb, x: transposed(bb, x, rng,
                                                                                **case)))
    check(mod, Plan(ops={"conv2d_transpose_0": OpPlacement("split", dim, ratio)}))


@pytest.mark.parametrize("first", ["conv2d_transpose_0", "conv2d_0"])
@pytest.mark.parametrize("ratio", [0.3, 0.75])
def test_row_chains_through_a_transposed_conv_equal_unsplit(first, ratio):
    rng = np.random.default_rng(8)

    def body(bb, x):
        if first == "conv2d_0":
            x = conv(bb, x, rng, 4, 3, padding=(1, 1, 1, 1), bias=True)
        x = transposed(bb, x, rng, 4, 3, 2, (1, 1, 1, 1), 1, bias=True)
        if first == "conv2d_transpose_0":
            x = conv(bb, x, rng, 3, 3, padding=(1, 1, 1, 1), bias=True)
        return x

    mod = codl_tvm.load_model(single_function((1, 3, 7, 6), body))
    check(mod, Plan(chains=[Chain(sorted(["conv2d_0", "conv2d_transpose_0"],
                                         key=lambda i: i != first), "H", ratio)]))


def test_every_row_part_has_a_padding_form_within_the_window_bounds():
    """The window admits a conv2d_transpose for rows where stride <= kernel and each padding
    < kernel; then every part of every split gets paddings >= 0 and an output padding below
    the stride, as TOPI requires (the pass would otherwise fail mid-rewrite)."""
    for k, s in ((kk, ss) for kk in range(1, 6) for ss in range(1, kk + 1)):
        for top, bottom, out_pad, h in itertools.product(range(k), range(k), range(s),
                                                         range(1, 8)):
            out_rows = (h - 1) * s - top - bottom + k + out_pad
            if out_rows < 2:
                continue
            window = TransposedWindow(k, s, 1, top, bottom)
            for n_gpu in range(1, out_rows):
                parts = chain_row_parts([(window, h)], out_rows, n_gpu / out_rows)
                if parts is None:  # a part that reads padding only: left whole
                    continue
                for (part,) in parts.values():
                    assert isinstance(part, RowPart)
                    p_top, p_bottom, extra = transposed_row_padding(k, s, top, part)
                    assert min(p_top, p_bottom, extra) >= 0 and extra < s
                    rows = part.src[1] - part.src[0]
                    assert (rows - 1) * s - p_top - p_bottom + k + extra == part.rows
