"""Every partition equals the unsplit model (relative error <= 1e-5) on the cpu-pair."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import const, conv, reference, rel_err, single_function
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tvm.relax import op as rop

import codl_tvm
from codl_tvm import Chain, OpPlacement, Plan

PAIR = codl_tvm.DevicePair.preset("cpu-pair")
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
RATIOS = st.one_of(st.sampled_from([0.0, 1.0, 0.5]), st.floats(0.01, 0.99))


def check(mod, plan: Plan, seed: int = 0) -> None:
    shape = [int(d) for d in mod["main"].params[0].ty.shape]
    x = np.random.default_rng(seed).standard_normal(shape).astype("float32")
    (ref,) = reference(mod, {"x": x})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # stated fallbacks (ratio leaves a device nothing)
        exe = codl_tvm.compile(mod, PAIR, plan)
    (out,) = exe.run({"x": x})
    assert out.shape == ref.shape
    assert rel_err(out, ref) <= 1e-5


@st.composite
def conv_case(draw):
    k = draw(st.sampled_from([1, 3, 5, 7]))
    dilation = draw(st.sampled_from([1, 1, 2]))
    stride = draw(st.sampled_from([1, 2]))
    extent = dilation * (k - 1) + 1
    ic = draw(st.integers(1, 6))
    kind = draw(st.sampled_from(["dense", "depthwise", "grouped"]))
    if kind == "depthwise":
        groups, oc = ic, ic * draw(st.integers(1, 2))
    elif kind == "grouped" and ic % 2 == 0:
        groups, oc = 2, 2 * draw(st.integers(1, 3))
    else:
        groups, oc = 1, draw(st.integers(1, 9))
    pad_kind = draw(st.sampled_from(["same", "valid", "explicit"]))
    if pad_kind == "same":
        total = extent - 1
        padding = (total // 2, total // 2, total - total // 2, total - total // 2)
    elif pad_kind == "valid":
        padding = (0, 0, 0, 0)
    else:
        padding = tuple(draw(st.integers(0, extent - 1)) for _ in range(4))
    h_min = max(1, extent - padding[0] - padding[2])
    w_min = max(1, extent - padding[1] - padding[3])
    h = draw(st.integers(h_min, h_min + 12))
    w = draw(st.integers(w_min, w_min + 6))
    return dict(shape=(1, ic, h, w), oc=oc, k=k, stride=stride, dilation=dilation,
                padding=padding, groups=groups, bias=draw(st.booleans()))


@SETTINGS
@given(case=conv_case(), dim=st.sampled_from(["H", "OC"]), ratio=RATIOS)
@example(case=dict(shape=(1, 8, 14, 14), oc=16, k=1, stride=2, dilation=1, padding=(0,) * 4,
                   groups=1, bias=True), dim="H", ratio=0.9)  # a ResNet shortcut, one-row part
def test_conv2d_split_equals_unsplit(case, dim, ratio):
    rng = np.random.default_rng(1)
    case = dict(case)  # the example's dict is hypothesis's to reuse
    shape = case.pop("shape")
    mod = codl_tvm.load_model(single_function(shape, lambda bb, x: conv(bb, x, rng, **case)))
    check(mod, Plan(ops={"conv2d_0": OpPlacement("split", dim, ratio)}))


@SETTINGS
@given(
    kind=st.sampled_from(["max", "avg"]),
    k=st.integers(1, 4),
    stride=st.integers(1, 3),
    pad=st.integers(0, 1),
    ceil=st.booleans(),
    include_pad=st.booleans(),
    h=st.integers(4, 13),
    dim=st.sampled_from(["H", "OC"]),
    ratio=RATIOS,
)
def test_pool2d_split_equals_unsplit(kind, k, stride, pad, ceil, include_pad, h, dim, ratio):
    pad = min(pad, k // 2)
    fn = rop.nn.max_pool2d if kind == "max" else rop.nn.avg_pool2d

    def body(bb, x):
        return bb.emit(fn(x, pool_size=(k, k), strides=(stride, stride), padding=(pad,) * 4,
                          ceil_mode=ceil, count_include_pad=include_pad))

    mod = codl_tvm.load_model(single_function((1, 3, h, 7), body))
    check(mod, Plan(ops={f"{kind}_pool2d_0": OpPlacement("split", dim, ratio)}))


@SETTINGS
@given(m=st.integers(1, 5), k=st.integers(1, 17), n=st.integers(1, 13),
       dim=st.sampled_from(["H", "OC"]), ratio=RATIOS, bias=st.booleans())
def test_matmul_split_equals_unsplit(m, k, n, dim, ratio, bias):
    rng = np.random.default_rng(2)

    def body(bb, x):
        y = bb.emit(rop.matmul(x, const(rng, (k, n))))
        return bb.emit(rop.add(y, const(rng, (n,)))) if bias else y

    mod = codl_tvm.load_model(single_function((m, k), body))
    check(mod, Plan(ops={"matmul_0": OpPlacement("split", dim, ratio)}))


@st.composite
def chain_case(draw):
    layers = []
    for _ in range(draw(st.integers(2, 4))):
        if draw(st.booleans()):
            layers.append(("conv", draw(st.sampled_from([1, 3, 5])), draw(st.sampled_from([1, 2]))))
        else:
            layers.append(("pool", 2, draw(st.sampled_from([1, 2]))))
    return layers


@SETTINGS
@given(layers=chain_case(), ratio=RATIOS, h=st.integers(12, 24))
def test_h_chain_equals_unsplit(layers, ratio, h):
    rng = np.random.default_rng(3)

    def body(bb, x):
        for kind, k, s in layers:
            if kind == "conv":
                x = conv(bb, x, rng, 3, k, stride=s, padding=(k // 2,) * 4, bias=True)
            else:
                x = bb.emit(rop.nn.max_pool2d(x, (k, k), (s, s), padding=(0, 0, 1, 1)))
        return x

    mod = codl_tvm.load_model(single_function((1, 3, h, 10), body))
    plan = Plan.uniform(mod, "H", ratio, chain=True)
    assert plan.chains, "consecutive ops must form a chain"
    check(mod, plan)


@pytest.mark.parametrize("ratio", [0.2, 0.5, 0.8])
def test_oc_chain_through_depthwise_and_pool_equals_unsplit(ratio):
    rng = np.random.default_rng(4)

    def body(bb, x):
        x = conv(bb, x, rng, 6, 3, padding=(1, 1, 1, 1), bias=True)
        x = conv(bb, x, rng, 6, 3, padding=(1, 1, 1, 1), groups=6, bias=True)
        return bb.emit(rop.nn.max_pool2d(x, (2, 2), (2, 2)))

    mod = codl_tvm.load_model(single_function((1, 3, 8, 8), body))
    ids = ["conv2d_0", "conv2d_1", "max_pool2d_0"]
    check(mod, Plan(chains=[Chain(ids, "OC", ratio)]))


@pytest.mark.parametrize(
    "h, k, ratio",
    [
        (2, 3, 0.5),  # one-row parts
        (8, 7, 0.9),  # a 1-row CPU part whose halo (6 rows) is wider than the part
        (9, 5, 0.12),  # a 1-row GPU part
    ],
)
def test_awkward_row_parts(h, k, ratio):
    rng = np.random.default_rng(5)
    pad = (k // 2,) * 4
    mod = codl_tvm.load_model(single_function((1, 2, h, 5), lambda bb, x: conv(bb, x, rng, 4, k,
                                                                                padding=pad)))
    check(mod, Plan(ops={"conv2d_0": OpPlacement("split", "H", ratio)}))


def test_residual_block_with_mixed_placements():
    rng = np.random.default_rng(6)

    def body(bb, x):
        a = conv(bb, x, rng, 4, 3, padding=(1, 1, 1, 1), bias=True)
        b = conv(bb, a, rng, 4, 3, padding=(1, 1, 1, 1))
        return bb.emit(rop.nn.relu(bb.emit(rop.add(a, b))))

    mod = codl_tvm.load_model(single_function((1, 4, 10, 10), body))
    for placement in (OpPlacement("cpu"), OpPlacement("split", "H", 0.4),
                      OpPlacement("split", "OC", 0.6)):
        check(mod, Plan(ops={"conv2d_0": OpPlacement("split", "H", 0.7), "conv2d_1": placement}))
    check(mod, Plan.single(mod, "cpu"))
