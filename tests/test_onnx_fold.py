"""Models as exporters write them: a channel shuffle whose reshape targets are computed at run
time the way TorchScript's exporter writes ``c // groups`` (Shape, Gather, Cast, Div, Floor,
Cast) loads once its static shape arithmetic is folded, and every partition of it equals
onnxruntime's answer."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import codl_tvm
from codl_tvm.onnx_fold import fold_static_shapes

ort = pytest.importorskip("onnxruntime")


def const(name: str, value) -> onnx.NodeProto:
    return h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(value)))


def shuffle_model(c: int, groups: int, hw: int, seed: int = 0) -> onnx.ModelProto:
    """conv -> channel shuffle (torchvision's ShuffleNet-V2 block) with exporter-style shapes."""
    w = np.random.default_rng(seed).standard_normal((c, 3, 3, 3)).astype("float32")
    nodes = [
        h.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1]),
        h.make_node("Shape", ["y"], ["s"]),
        *[const(f"i{k}", np.int64(k)) for k in range(4)],
        const("ax", np.array([0], np.int64)), const("g", np.array([groups], np.int64)),
        const("m1", np.array([-1], np.int64)), const("gf", np.float32(groups)),
        *[h.make_node("Gather", ["s", f"i{k}"], [f"d{k}"], axis=0) for k in range(4)],
        h.make_node("Cast", ["d1"], ["cf"], to=T.FLOAT),
        h.make_node("Div", ["cf", "gf"], ["qf"]),
        h.make_node("Floor", ["qf"], ["ff"]),
        h.make_node("Cast", ["ff"], ["q"], to=T.INT64),
        *[h.make_node("Unsqueeze", [v, "ax"], [f"u{v}"]) for v in ("d0", "q", "d2", "d3")],
        h.make_node("Concat", ["ud0", "g", "uq", "ud2", "ud3"], ["s5"], axis=0),
        h.make_node("Reshape", ["y", "s5"], ["r5"]),
        h.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
        h.make_node("Concat", ["ud0", "m1", "ud2", "ud3"], ["s4"], axis=0),
        h.make_node("Reshape", ["t5", "s4"], ["out"]),
    ]
    graph = h.make_graph(nodes, "shuffle", [h.make_tensor_value_info("x", T.FLOAT,
                                                                     [1, 3, hw, hw])],
                         [h.make_tensor_value_info("out", T.FLOAT, [1, c, hw, hw])],
                         initializer=[nh.from_array(w, "W")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_folding_leaves_no_shape_arithmetic():
    folded = fold_static_shapes(shuffle_model(8, 2, 6))
    ops = [n.op_type for n in folded.graph.node]
    assert ops == ["Conv", "Reshape", "Transpose", "Reshape"]
    onnx.checker.check_model(folded)


@settings(max_examples=6, deadline=None)
@given(groups=st.sampled_from([2, 4]), per_group=st.integers(1, 3), hw=st.integers(3, 9),
       dim=st.sampled_from(["H", "OC"]), ratio=st.sampled_from([0.3, 0.5, 0.8]))
def test_every_partition_of_an_exported_shuffle_equals_onnxruntime(groups, per_group, hw, dim,
                                                                  ratio):
    model = shuffle_model(groups * per_group, groups, hw)
    x = np.random.default_rng(hw).standard_normal((1, 3, hw, hw)).astype("float32")
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    mod = codl_tvm.load_model(model)
    with warnings.catch_warnings():  # a share that leaves a device no rows runs whole
        warnings.simplefilter("ignore")
        exe = codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"),
                               codl_tvm.Plan.uniform(mod, dim, ratio))
    out = exe.run({"x": x})[0]
    assert np.linalg.norm(out - ref) <= 1e-5 * np.linalg.norm(ref)
