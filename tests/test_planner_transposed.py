"""A conv2d_transpose is a planned op, priced as the conv it runs as, not as a pass.

Regression: fast-style-transfer's two ConvTransposes were priced as elementwise kernels over
their outputs (about 1 ms on the GPU machine's CPU), while they run as stride-1 convs over
their dilated inputs (about 30 ms there): the CPU-only prediction was 0.76 of measured. They
were then ops outside the plan, run whole on the GPU: a third of the model's GPU time at 8 SMs
that no plan could share; now the planner splits them by rows or channels.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codl_tvm
from codl_tvm import zoo
from codl_tvm.planner import AnalyticCosts, build_graph
from codl_tvm.planner.api import for_pair
from codl_tvm.planner.candidates import ScaledCosts
from codl_tvm.planner.costs import PredictorCosts
from codl_tvm.planner.nodes import OpNode, transposed_conv
from codl_tvm.planner.opgraph import ModelGraph
from codl_tvm.planner.search import Evaluator, spec_parts
from codl_tvm.predictor import DATA_DIR, load, mirror
from codl_tvm.predictor.split_sharing import cpu_chunk_specs


def conv_transpose_ref(x: np.ndarray, w: np.ndarray, stride: int, pad: tuple[int, ...],
                       out_pad: int) -> np.ndarray:
    """The definition: each input pixel scatters its kernel-sized patch, then the padding
    is cropped (``pad``: top, left, bottom, right)."""
    ic, h, wd = x.shape
    _, oc, k, _ = w.shape
    full = np.zeros((oc, (h - 1) * stride + k + out_pad, (wd - 1) * stride + k + out_pad))
    for i in range(h):
        for j in range(wd):
            patch = np.einsum("c,cokl->okl", x[:, i, j], w)
            full[:, i * stride:i * stride + k, j * stride:j * stride + k] += patch
    top, left, bottom, right = pad
    return full[:, top:full.shape[1] - bottom, left:full.shape[2] - right]


def conv_ref(x: np.ndarray, w: np.ndarray, pad: tuple[int, ...]) -> np.ndarray:
    """A stride-1 conv (OIHW weight) with ``pad`` (top, left, bottom, right)."""
    xp = np.pad(x, ((0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    oc, _, k, _ = w.shape
    oh, ow = xp.shape[1] - k + 1, xp.shape[2] - k + 1
    out = np.zeros((oc, oh, ow))
    for r in range(k):
        for s in range(k):
            out += np.einsum("oc,chw->ohw", w[:, :, r, s], xp[:, r:r + oh, s:s + ow])
    return out


@settings(max_examples=40, deadline=None)
@given(h=st.integers(1, 6), w=st.integers(1, 6), ic=st.integers(1, 3), oc=st.integers(1, 3),
       k=st.integers(1, 4), stride=st.integers(1, 3), data=st.data())
def test_the_priced_conv_computes_the_transposed_conv(h, w, ic, oc, k, stride, data) -> None:
    pad = tuple(data.draw(st.integers(0, k - 1)) for _ in range(4))
    out_pad = data.draw(st.integers(0, stride - 1))
    spec = transposed_conv([1, ic, h, w], [ic, oc, k, k], (stride, stride), pad,
                           (out_pad, out_pad))
    out_h = (h - 1) * stride - pad[0] - pad[2] + k + out_pad
    out_w = (w - 1) * stride - pad[1] - pad[3] + k + out_pad
    if min(out_h, out_w) < 1:  # crops everything: no op
        assert spec is None
        return
    x, wt = rng_tensor((ic, h, w)), rng_tensor((ic, oc, k, k))
    want = conv_transpose_ref(x, wt, stride, pad, out_pad)
    assert (spec.out_h, spec.out_w, spec.OC) == (want.shape[1], want.shape[2], oc)
    assert (spec.SH, spec.SW, spec.KH, spec.IC) == (1, 1, k, ic)
    # the spec's conv, over the input dilated by the stride, with the kernel flipped
    dilated = np.zeros((ic, spec.H, spec.W))
    dilated[:, ::stride, ::stride] = x
    flipped = wt.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
    np.testing.assert_allclose(conv_ref(dilated, flipped, spec.pad), want, atol=1e-9)


def rng_tensor(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape)


def test_only_the_transposed_convs_the_conv_kernels_run_get_a_conv() -> None:
    args = ([1, 4, 5, 5], [4, 4, 3, 3], (2, 2), (1, 1, 1, 1), (1, 1))
    assert transposed_conv(*args) is not None
    assert transposed_conv(*args, groups=2) is None
    assert transposed_conv(*args, dilation=(2, 2)) is None
    assert transposed_conv(*args[:3], (3, 3, 3, 3), (0, 0)) is None  # crops past the kernel
    # crops every row (hypothesis found it): an empty output is no op
    assert transposed_conv([1, 1, 1, 1], [1, 1, 3, 3], (1, 1), (1, 0, 2, 0), (0, 0)) is None


@pytest.fixture(scope="module")
def fst() -> ModelGraph:
    return build_graph(codl_tvm.load_model(zoo.get("fast-style-transfer")))


def ups(mg: ModelGraph) -> list[OpNode]:
    return [n for n in mg.nodes if n.kind == "conv2d_transpose"]


def test_the_graph_plans_each_transposed_conv_as_its_conv(fst) -> None:
    assert len(ups(fst)) == 2
    assert not [g for g in fst.glue if g.op == "relax.nn.conv2d_transpose"]
    for n in ups(fst):
        assert n.transposed and n.dims == ("H", "OC")
        assert [1, n.spec.OC, n.spec.out_h, n.spec.out_w] == n.out_shape
    assert ModelGraph.from_json(fst.to_json()).nodes == fst.nodes
    # priced as the conv over its dilated input, whose rows are not its producer's: it may
    # head a row chain but not continue one
    before = fst.by_id["conv2d_12"]
    assert before.order + 1 == ups(fst)[0].order and not before.chain_next["H"]


def test_a_transposed_conv_runs_the_direct_and_tiled_kernels_never_winograd(fst) -> None:
    pred = load(DATA_DIR / "predictor-x86-cuda.json")
    conv = next(n.spec for n in ups(fst) if n.spec.IC == 128)
    assert mirror.kernel("cpu", conv, pred.machine_).algorithm == "winograd-2x2-3x3"
    assert mirror.transposed_kernel("cpu", conv, pred.machine_).algorithm == "direct-nchwc"
    assert mirror.transposed_kernel("gpu", conv, pred.machine_).algorithm.startswith(
        "gpu-conv-tiled")
    costs = PredictorCosts(pred)
    assert costs.transposed_conv_us("cpu", conv) == pytest.approx(
        pred._kernel_us("cpu", conv, "direct-nchwc") * pred._speed("cpu"))


def test_the_planner_prices_the_conv_where_it_runs(fst) -> None:
    costs = PredictorCosts(load(DATA_DIR / "predictor-x86-cuda.json"))
    ev = Evaluator(costs, fst.nodes, fst.glue)
    up = ups(fst)[0]
    for role in ("cpu", "gpu"):
        assert ev.whole(up, role) == pytest.approx(costs.transposed_conv_us(role, up.spec))
    assert ev.whole(up, "cpu") != pytest.approx(costs.kernel_us("cpu", up.spec))  # not Winograd
    # its parts too: each part is the conv over the part's dilated rows
    unit = ev.unit([up], "H", 0.75)
    parts = spec_parts([up.spec], "H", 0.75)
    assert unit.cpu_us == pytest.approx(costs.transposed_conv_us("cpu", parts["cpu"][0]))
    assert unit.gpu_us == pytest.approx(costs.transposed_conv_us("gpu", parts["gpu"][0]))
    scaled = Evaluator(ScaledCosts(costs, 2.0), fst.nodes, fst.glue)
    assert scaled.whole(up, "cpu") == pytest.approx(2 * ev.whole(up, "cpu"))
    assert scaled.whole(up, "gpu") == pytest.approx(ev.whole(up, "gpu"))
    # a source that cannot tell kernels apart prices the conv's work
    plain = Evaluator(AnalyticCosts(), fst.nodes, fst.glue)
    assert plain.whole(up, "cpu") == pytest.approx(AnalyticCosts().kernel_us("cpu", up.spec))


def test_the_cpu_chunks_of_a_transposed_part_are_priced_as_its_kernel(fst) -> None:
    """Regression: where the CPU's rows run in chunks (copies beside kernels), the chunks of
    a ConvTranspose's part were priced as the plain conv's kernel (Winograd on the CPU)."""
    pair = codl_tvm.DevicePair.preset("x86-cuda", arch="sm_90", num_cores=16)
    costs = for_pair(PredictorCosts(load(DATA_DIR / "predictor-x86-cuda.json")), pair, None, 2)
    ev = Evaluator(costs, fst.nodes, fst.glue)
    up = ups(fst)[0]  # 128 input channels: Winograd as a plain conv
    chunks = cpu_chunk_specs(spec_parts([up.spec], "H", 0.75)["cpu"], 2, up.repeat)
    assert costs.overlap and len(chunks) == 2
    want = sum(costs.transposed_conv_us("cpu", c[0]) for c in chunks)
    assert ev.unit([up], "H", 0.75).cpu_us == pytest.approx(want)
    assert want != pytest.approx(sum(costs.kernel_us("cpu", c[0]) for c in chunks))
