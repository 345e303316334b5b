"""Fold an ONNX graph's static shape arithmetic into constants before TVM imports it.

Exporters compute reshape targets at run time: TorchScript's exporter turns ``c // groups`` of
a channel shuffle into ``Shape -> Gather -> Cast -> Div -> Floor -> Cast``, which TVM 0.27's
importer cannot follow (``Floor`` of a shape value). With static input shapes every such value
is known before import: ONNX's own shape inference gives each ``Shape`` its value, and nodes
whose inputs are all constants are evaluated by ONNX's reference evaluator. The graph keeps
its outputs; only nodes that compute constants disappear.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

# ops evaluated when every input is known (shape arithmetic; no op reads a large tensor)
FOLDABLE = frozenset({
    "Add", "Cast", "Ceil", "Concat", "ConstantOfShape", "Div", "Equal", "Expand", "Floor",
    "Gather", "Identity", "Less", "Max", "Min", "Mul", "Neg", "Range", "ReduceProd", "Reshape",
    "Shape", "Slice", "Sqrt", "Squeeze", "Sub", "Unsqueeze", "Where",
})  # fmt: skip
MAX_FOLDED_ELEMENTS = 1 << 16  # larger constant results stay nodes (TVM folds weights itself)


def fold_static_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose shape computations on static shapes are constants.

    Parameters
    ----------
    model : onnx.ModelProto
        With static input shapes (overrides applied to ``graph.input`` beforehand).
    """
    inferred = shape_inference.infer_shapes(model)
    graph = inferred.graph
    static = {vi.name: _dims(vi) for vi in [*graph.input, *graph.value_info, *graph.output]}
    known = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    kept = []
    for node in graph.node:
        value = _fold(node, known, static, model.opset_import)
        if value is None:
            kept.append(node)
        else:
            known.update(value)
    if len(kept) == len(graph.node):
        return model
    used = {name for node in kept for name in node.input} | {o.name for o in graph.output}
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in known.items() if k in used]
    new_graph = helper.make_graph(kept, graph.name, list(model.graph.input),
                                  list(model.graph.output), initializer=inits)
    out = helper.make_model(new_graph, opset_imports=list(model.opset_import),
                            ir_version=model.ir_version)
    return out


def _dims(vi: onnx.ValueInfoProto) -> list[int] | None:
    shape = vi.type.tensor_type.shape
    dims = [d.dim_value if d.HasField("dim_value") else None for d in shape.dim]
    return None if any(d is None for d in dims) else dims


def _fold(node: onnx.NodeProto, known: dict, static: dict,
          opsets) -> dict[str, np.ndarray] | None:
    """The node's outputs as constants, or None when it must stay."""
    if node.op_type == "Constant":
        return {node.output[0]: numpy_helper.to_array(helper.get_attribute_value(node.attribute[0]))
                } if node.attribute and node.attribute[0].name == "value" else None
    if node.op_type == "Shape" and static.get(node.input[0]) is not None:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        dims = static[node.input[0]][attrs.get("start", 0):attrs.get("end")]
        return {node.output[0]: np.array(dims, dtype=np.int64)}
    inputs = [i for i in node.input if i]
    if node.op_type not in FOLDABLE or not inputs or not all(i in known for i in inputs):
        return None
    if any(np.asarray(known[i]).size > MAX_FOLDED_ELEMENTS for i in inputs):
        return None
    outputs = _evaluate(node, {i: known[i] for i in inputs}, opsets)
    if any(np.asarray(v).size > MAX_FOLDED_ELEMENTS for v in outputs.values()):
        return None
    return outputs


def _evaluate(node: onnx.NodeProto, feeds: dict[str, np.ndarray],
              opsets) -> dict[str, np.ndarray]:
    graph = helper.make_graph(
        [node], "fold",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype),
                                       None) for k, v in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in node.output if o])
    model = helper.make_model(graph, opset_imports=list(opsets))
    values = ReferenceEvaluator(model).run(None, feeds)
    return dict(zip([o for o in node.output if o], values))
