"""Graph-building helpers shared by every zoo model.

A :class:`GraphBuilder` accumulates ONNX nodes and initializers and tracks the static shape
of every tensor it creates, so the model files read like the papers' layer tables.
Weights are drawn from one seeded numpy generator (He-style scale) so a model is a pure
function of its name, configuration and seed.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 17
BN_EPS = 1e-5

# Gain of He initialisation for each activation: keeps the activation variance roughly
# constant from layer to layer, so deep nets neither vanish to 0 nor overflow.
GAIN = {"relu": 2.0, "relu6": 2.0, "leaky": 2.0 / (1.0 + 0.1**2), "none": 1.0, "tanh": 1.0}


@dataclass(frozen=True)
class T:
    """A tensor of the graph under construction: its ONNX name and static shape."""

    name: str
    shape: tuple[int, ...]


def same_pads(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """TensorFlow SAME padding (output = ceil(size / s)); the extra pixel goes at the end."""
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


class GraphBuilder:
    """Accumulates an ONNX graph with deterministic random weights.

    Parameters
    ----------
    name : str
        Graph name.
    seed : int
        Seed of the weight generator.
    fold_bn : bool
        Fold batch normalisation into the preceding convolution (an inference graph as
        exporters write it) instead of emitting ``BatchNormalization`` nodes.
    """

    def __init__(self, name: str, seed: int = 0, fold_bn: bool = True) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.fold_bn = fold_bn
        self.nodes: list[onnx.NodeProto] = []
        # Initializers go straight into the final ModelProto: copying 0.5 GB of VGG-16
        # weights between protos would double the build time.
        self._model = onnx.ModelProto()
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._counts: Counter[str] = Counter()

    # -- plumbing ---------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self._counts[prefix] += 1
        return f"{prefix}_{self._counts[prefix]}"

    def const(self, value: np.ndarray, prefix: str = "c") -> str:
        name = self.fresh(prefix)
        arr = np.asarray(value, order="C")
        tensor = self._model.graph.initializer.add()
        tensor.name = name
        tensor.data_type = helper.np_dtype_to_tensor_dtype(arr.dtype)
        tensor.dims.extend(arr.shape)
        tensor.raw_data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        return name

    def op(self, op_type: str, inputs: list[str], shape: tuple[int, ...], **attrs) -> T:
        out = self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return T(out, tuple(int(d) for d in shape))

    def input(self, name: str, shape: tuple[int, ...], dtype: int = TensorProto.FLOAT) -> T:
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))
        return T(name, tuple(shape))

    def output(self, x: T, name: str, dtype: int = TensorProto.FLOAT) -> None:
        self.nodes.append(helper.make_node("Identity", [x.name], [name], name=f"{name}_id"))
        self.outputs.append(helper.make_tensor_value_info(name, dtype, list(x.shape)))

    def model(self, metadata: dict[str, str] | None = None) -> onnx.ModelProto:
        model = self._model
        model.graph.name = self.name
        model.graph.node.extend(self.nodes)
        model.graph.input.extend(self.inputs)
        model.graph.output.extend(self.outputs)
        model.opset_import.append(helper.make_opsetid("", OPSET))
        model.producer_name = "codl_tvm.zoo"
        model.ir_version = 8  # readable by every onnx>=1.13 / onnxruntime
        for key, value in (metadata or {}).items():
            model.metadata_props.add(key=key, value=value)
        return model

    # -- weights ----------------------------------------------------------------------------
    def he(self, shape: tuple[int, ...], fan_in: int, act: str = "relu") -> np.ndarray:
        std = math.sqrt(GAIN[act] / fan_in)
        return self.normal(shape, std)

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        x = self.rng.standard_normal(shape, dtype=np.float32)
        x *= np.float32(std)  # in place: VGG-16's 138M weights are built in seconds
        return x

    def bn_params(self, c: int) -> tuple[np.ndarray, ...]:
        """Mild random statistics: scale ~1 so folding keeps the He variance."""
        gamma = self.rng.uniform(0.8, 1.2, c).astype(np.float32)
        beta = self.normal((c,), 0.05)
        mean = self.normal((c,), 0.05)
        var = self.rng.uniform(0.8, 1.2, c).astype(np.float32)
        return gamma, beta, mean, var

    # -- activations and elementwise --------------------------------------------------------
    def act(self, x: T, kind: str) -> T:
        if kind == "none":
            return x
        if kind == "relu":
            return self.op("Relu", [x.name], x.shape)
        if kind == "leaky":
            return self.op("LeakyRelu", [x.name], x.shape, alpha=0.1)
        if kind == "relu6":
            lo = self.const(np.array(0.0, np.float32), "zero")
            hi = self.const(np.array(6.0, np.float32), "six")
            return self.op("Clip", [x.name, lo, hi], x.shape)
        if kind in ("tanh", "sigmoid"):
            return self.op(kind.capitalize(), [x.name], x.shape)
        raise ValueError(f"unknown activation {kind!r}")

    def binary(self, op_type: str, a: T, b: T | str) -> T:
        b_name = b.name if isinstance(b, T) else b
        shape = a.shape if not isinstance(b, T) else tuple(np.broadcast_shapes(a.shape, b.shape))
        return self.op(op_type, [a.name, b_name], shape)

    def concat(self, xs: list[T], axis: int = 1) -> T:
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        return self.op("Concat", [x.name for x in xs], tuple(shape), axis=axis)

    # -- CNN layers (NCHW) ------------------------------------------------------------------
    def conv(
        self,
        x: T,
        oc: int,
        k: int | tuple[int, int],
        s: int = 1,
        pad: str | int | tuple[int, int] = "same",
        group: int = 1,
        bn: bool = False,
        act: str = "relu",
        bias: bool = True,
        gain_scale: float = 1.0,
    ) -> T:
        """Conv (+ batch norm) (+ activation).

        ``pad``: "same" (TF: output = ceil(in/s), extra pixel at the end), "valid", or an
        int / (ph, pw) symmetric explicit padding as torchvision writes it.
        """
        n, ic, h, w = x.shape
        kh, kw = (k, k) if isinstance(k, int) else k
        if pad == "same":
            (pt, pb), (pl, pr) = same_pads(h, kh, s), same_pads(w, kw, s)
        elif pad == "valid":
            pt = pb = pl = pr = 0
        else:
            ph, pw = (pad, pad) if isinstance(pad, int) else pad
            pt, pb, pl, pr = ph, ph, pw, pw
        oh = (h + pt + pb - kh) // s + 1
        ow = (w + pl + pr - kw) // s + 1
        if oh < 1 or ow < 1:
            raise ValueError(f"{self.name}: input {h}x{w} too small for a {kh}x{kw} conv")
        fan_in = ic // group * kh * kw
        wt = self.he((oc, ic // group, kh, kw), fan_in, act) * np.float32(gain_scale)
        b = self.normal((oc,), 0.01) if bias else np.zeros(oc, np.float32)
        unfolded = bn and not self.fold_bn
        if bn and self.fold_bn:
            gamma, beta, mean, var = self.bn_params(oc)
            scale = gamma / np.sqrt(var + BN_EPS)
            wt = wt * scale[:, None, None, None]
            b = (beta + (b - mean) * scale).astype(np.float32)
        ins = [x.name, self.const(wt, "w")]
        if bias or bn:
            ins.append(self.const(b, "b"))
        attrs = dict(kernel_shape=[kh, kw], strides=[s, s], pads=[pt, pl, pb, pr])
        if group != 1:
            attrs["group"] = group
        y = self.op("Conv", ins, (n, oc, oh, ow), **attrs)
        if unfolded:
            names = [self.const(p, "bn") for p in self.bn_params(oc)]
            y = self.op("BatchNormalization", [y.name, *names], y.shape, epsilon=BN_EPS)
        return self.act(y, act)

    def conv_transpose(self, x: T, oc: int, k: int, s: int, act: str = "relu") -> T:
        """Transposed conv that multiplies H and W by ``s`` exactly (as TF's SAME)."""
        n, ic, h, w = x.shape
        pad_total = k - 1  # with output_padding = s-1: out = s*(in-1) + s-1 + k - pads = s*in
        p0, p1 = pad_total // 2, pad_total - pad_total // 2
        wt = self.he((ic, oc, k, k), ic * k * k // (s * s), act)
        ins = [x.name, self.const(wt, "w"), self.const(self.normal((oc,), 0.01), "b")]
        y = self.op(
            "ConvTranspose", ins, (n, oc, h * s, w * s), kernel_shape=[k, k],
            strides=[s, s], pads=[p0, p0, p1, p1], output_padding=[s - 1, s - 1],
        )  # fmt: skip
        return self.act(y, act)

    def pool(
        self, x: T, kind: str, k: int, s: int, pad: int | str = 0, count_include_pad: int = 0
    ) -> T:
        n, c, h, w = x.shape
        (pt, pb), (pl, pr) = (
            (same_pads(h, k, s), same_pads(w, k, s)) if pad == "same" else ((pad,) * 2,) * 2
        )
        oh, ow = (h + pt + pb - k) // s + 1, (w + pl + pr - k) // s + 1
        if oh < 1 or ow < 1:
            raise ValueError(f"{self.name}: input {h}x{w} too small for a {k}x{k} pool")
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[pt, pl, pb, pr])
        if kind == "avg":
            attrs["count_include_pad"] = count_include_pad
        return self.op({"max": "MaxPool", "avg": "AveragePool"}[kind], [x.name], (n, c, oh, ow),
                       **attrs)  # fmt: skip

    def global_avg_pool(self, x: T) -> T:
        return self.op("GlobalAveragePool", [x.name], (*x.shape[:2], 1, 1))

    def flatten(self, x: T) -> T:
        return self.op("Flatten", [x.name], (x.shape[0], int(np.prod(x.shape[1:]))), axis=1)

    def dense(self, x: T, oc: int, act: str = "relu") -> T:
        """Fully connected layer as exporters write it: Gemm with a (OC, IC) weight."""
        n, ic = x.shape
        wt = self.he((oc, ic), ic, act)
        ins = [x.name, self.const(wt, "w"), self.const(self.normal((oc,), 0.01), "b")]
        return self.act(self.op("Gemm", ins, (n, oc), transB=1), act)

    # -- sequence layers ([..., K] x [K, N]) ------------------------------------------------
    def linear(self, x: T, n_out: int, std: float | None = None, bias: bool = True) -> T:
        k = x.shape[-1]
        wt = self.normal((k, n_out), std if std is not None else 1.0 / math.sqrt(k))
        y = self.op("MatMul", [x.name, self.const(wt, "w")], (*x.shape[:-1], n_out))
        if bias:
            y = self.binary("Add", y, self.const(self.normal((n_out,), 0.01), "b"))
        return y

    def reshape(self, x: T, shape: tuple[int, ...]) -> T:
        return self.op("Reshape", [x.name, self.const(np.array(shape, np.int64), "shape")], shape)

    def transpose(self, x: T, perm: tuple[int, ...]) -> T:
        return self.op("Transpose", [x.name], tuple(x.shape[p] for p in perm), perm=list(perm))

    def split(self, x: T, parts: int, axis: int = -1) -> list[T]:
        axis = axis % len(x.shape)
        size = x.shape[axis] // parts
        shape = tuple(size if i == axis else d for i, d in enumerate(x.shape))
        sizes = self.const(np.full(parts, size, np.int64), "split")
        outs = [self.fresh("split") for _ in range(parts)]
        self.nodes.append(helper.make_node("Split", [x.name, sizes], outs, name=outs[0], axis=axis))
        return [T(o, shape) for o in outs]
