"""The ONNX graph of a zoo model that torchvision lacks (YOLO-V2, BERT-base) replayed op by op
with PyTorch calls: the PyTorch anchor of ``benchmarks/anchors.py`` for those models, and the
fallback where torchvision is missing on the target."""

from __future__ import annotations

from typing import Any

import numpy as np


def graph_json(model: Any) -> dict[str, Any]:
    """The ONNX graph as plain data (nodes, inputs, outputs): what :class:`Replay` runs."""
    from onnx import helper

    def attr(a: Any) -> Any:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            return v.decode()
        if isinstance(v, (list, tuple)):
            return list(v)
        if hasattr(v, "dims"):
            raise ValueError(f"tensor attribute {a.name} not supported")
        return v

    g = model.graph
    inits = {i.name for i in g.initializer}
    return {"nodes": [{"op": n.op_type, "inputs": list(n.input), "outputs": list(n.output),
                       "attrs": {a.name: attr(a) for a in n.attribute}} for n in g.node],
            "inputs": [i.name for i in g.input if i.name not in inits],
            "outputs": [o.name for o in g.output]}


class Replay:
    """An ONNX graph run op by op with PyTorch calls (eager; CUDA-graph capturable): the
    PyTorch anchor of zoo models torchvision has no module for (YOLO-V2, BERT-base)."""

    def __init__(self, graph: dict[str, Any], inits: dict[str, np.ndarray], device: str):
        import torch

        self.graph = graph
        self.consts = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device)
                       for k, v in inits.items()}
        self.host = inits  # shapes and clip bounds are read on the host (no device sync)
        self.ops = _ops()
        unknown = {n["op"] for n in graph["nodes"]} - set(self.ops)
        if unknown:
            raise ValueError(f"replay has no op {', '.join(sorted(unknown))}")

    def __call__(self, **inputs: Any) -> list[Any]:
        env = {**self.consts, **inputs}
        for n in self.graph["nodes"]:
            args = [env[i] if i else None for i in n["inputs"]]
            out = self.ops[n["op"]](self, n, args, n["attrs"])
            env[n["outputs"][0]] = out
        return [env[o] for o in self.graph["outputs"]]


def _reshape(self: Replay, n: dict, x: list, a: dict) -> Any:
    shape = [int(d) for d in self.host[n["inputs"][1]]]
    shape = [x[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x[0].reshape(shape)


def _space_to_depth(x: Any, b: int) -> Any:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4).reshape(
        n, c * b * b, h // b, w // b)


def _gemm(x: list, a: dict) -> Any:
    m = x[0].T if a.get("transA") else x[0]
    y = m @ (x[1].T if a.get("transB") else x[1])
    y = y * a["alpha"] if a.get("alpha", 1.0) != 1.0 else y
    if len(x) > 2 and x[2] is not None:
        y = y + (x[2] * a["beta"] if a.get("beta", 1.0) != 1.0 else x[2])
    return y


def _padded(x: Any, a: dict, value: float) -> tuple[Any, list[int]]:
    """ONNX pads (top, left, bottom, right): symmetric ones for the op, others applied here."""
    import torch.nn.functional as F

    p = a.get("pads", [0, 0, 0, 0])
    if p[0] == p[2] and p[1] == p[3]:
        return x, p[:2]
    return F.pad(x, (p[1], p[3], p[0], p[2]), value=value), [0, 0]


def _conv(x: list, a: dict) -> Any:
    import torch.nn.functional as F

    x0, pads = _padded(x[0], a, 0.0)
    return F.conv2d(x0, x[1], x[2] if len(x) > 2 else None, a.get("strides", [1, 1]), pads,
                    a.get("dilations", [1, 1]), a.get("group", 1))


def _max_pool(x: list, a: dict) -> Any:
    import torch.nn.functional as F

    x0, pads = _padded(x[0], a, float("-inf"))
    return F.max_pool2d(x0, a["kernel_shape"], a.get("strides", [1, 1]), pads,
                        ceil_mode=bool(a.get("ceil_mode", 0)))


def _ops() -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    dtypes = {1: torch.float32, 6: torch.int32, 7: torch.int64, 9: torch.bool}
    return {
        "Conv": lambda s, n, x, a: _conv(x, a),
        "Relu": lambda s, n, x, a: F.relu(x[0]),
        "LeakyRelu": lambda s, n, x, a: F.leaky_relu(x[0], a.get("alpha", 0.01)),
        "Clip": lambda s, n, x, a: torch.clamp(x[0], *(float(s.host[i]) if i else None
                                                      for i in n["inputs"][1:3])),
        "MaxPool": lambda s, n, x, a: _max_pool(x, a),
        "GlobalAveragePool": lambda s, n, x, a: x[0].mean((2, 3), keepdim=True),
        "Flatten": lambda s, n, x, a: x[0].flatten(a.get("axis", 1)),
        "SpaceToDepth": lambda s, n, x, a: _space_to_depth(x[0], a["blocksize"]),
        "Concat": lambda s, n, x, a: torch.cat(x, a["axis"]),
        "Identity": lambda s, n, x, a: x[0],
        "Gather": lambda s, n, x, a: torch.index_select(
            x[0], a.get("axis", 0), x[1].reshape(-1)).reshape(
            *x[0].shape[:a.get("axis", 0)], *x[1].shape, *x[0].shape[a.get("axis", 0) + 1:]),
        "Add": lambda s, n, x, a: x[0] + x[1], "Sub": lambda s, n, x, a: x[0] - x[1],
        "Mul": lambda s, n, x, a: x[0] * x[1], "Div": lambda s, n, x, a: x[0] / x[1],
        "MatMul": lambda s, n, x, a: torch.matmul(x[0], x[1]),
        "Gemm": lambda s, n, x, a: _gemm(x, a),
        "Cast": lambda s, n, x, a: x[0].to(dtypes[a["to"]]),
        "Reshape": _reshape,
        "Transpose": lambda s, n, x, a: x[0].permute(*a["perm"]),
        "Softmax": lambda s, n, x, a: torch.softmax(x[0], a.get("axis", -1)),
        "LayerNormalization": lambda s, n, x, a: F.layer_norm(
            x[0], x[0].shape[a.get("axis", -1):], x[1], x[2] if len(x) > 2 else None,
            a.get("epsilon", 1e-5)),
        "Erf": lambda s, n, x, a: torch.erf(x[0]), "Tanh": lambda s, n, x, a: torch.tanh(x[0]),
    }
