"""BERT-base encoder (Devlin et al., NAACL'19) with EOP's settings: vocab 32000, hidden 768,
12 layers, 12 heads, intermediate 3072, sequence 128.

Inputs ``input_ids`` and ``attention_mask`` (int64, (N, S)); outputs ``last_hidden_state``
(N, S, hidden) and ``pooler_output`` (N, hidden). Opset 17 has no Gelu, so GELU is the exact
erf form x/2 (1 + erf(x / sqrt 2)) as exporters write it. Weights N(0, 0.02) as BERT's init.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from .layers import GraphBuilder, T

STD = 0.02


def _scalar(g: GraphBuilder, v: float) -> str:
    return g.const(np.array(v, np.float32), "c")


def _layer_norm(g: GraphBuilder, x: T) -> T:
    h = x.shape[-1]
    gamma = g.const(np.ones(h, np.float32) + g.normal((h,), STD), "ln_g")
    beta = g.const(g.normal((h,), STD), "ln_b")
    return g.op("LayerNormalization", [x.name, gamma, beta], x.shape, axis=-1, epsilon=1e-12)


def _gelu(g: GraphBuilder, x: T) -> T:
    e = g.op("Erf", [g.binary("Div", x, _scalar(g, math.sqrt(2.0))).name], x.shape)
    e = g.binary("Add", e, _scalar(g, 1.0))
    return g.binary("Mul", g.binary("Mul", x, e), _scalar(g, 0.5))


def _heads(g: GraphBuilder, x: T, heads: int, perm: tuple[int, ...]) -> T:
    n, s, h = x.shape
    return g.transpose(g.reshape(x, (n, s, heads, h // heads)), perm)


def _attention(g: GraphBuilder, x: T, mask_bias: T, heads: int) -> T:
    n, s, h = x.shape
    q = _heads(g, g.linear(x, h, STD), heads, (0, 2, 1, 3))  # (N, heads, S, dh)
    k = _heads(g, g.linear(x, h, STD), heads, (0, 2, 3, 1))  # (N, heads, dh, S)
    v = _heads(g, g.linear(x, h, STD), heads, (0, 2, 1, 3))
    scores = g.op("MatMul", [q.name, k.name], (n, heads, s, s))
    scores = g.binary("Div", scores, _scalar(g, math.sqrt(h // heads)))
    probs = g.op("Softmax", [g.binary("Add", scores, mask_bias).name], (n, heads, s, s), axis=-1)
    ctx = g.op("MatMul", [probs.name, v.name], (n, heads, s, h // heads))
    ctx = g.reshape(g.transpose(ctx, (0, 2, 1, 3)), (n, s, h))
    return g.linear(ctx, h, STD)


def _encoder_layer(g: GraphBuilder, x: T, mask_bias: T, heads: int, inter: int) -> T:
    x = _layer_norm(g, g.binary("Add", x, _attention(g, x, mask_bias, heads)))
    y = g.linear(_gelu(g, g.linear(x, inter, STD)), x.shape[-1], STD)
    return _layer_norm(g, g.binary("Add", x, y))


def build_bert(
    g: GraphBuilder, batch: int, input_shape: tuple[int, ...], num_layers: int = 12,
    hidden_size: int = 768, num_heads: int = 12, intermediate_size: int = 3072,
    vocab_size: int = 32000,
) -> None:  # fmt: skip
    """BERT encoder + pooler; ``input_shape`` = (seq_len,)."""
    if hidden_size % num_heads:
        raise ValueError(f"bert: hidden_size {hidden_size} not divisible by {num_heads} heads")
    (seq_len,) = input_shape
    ids = g.input("input_ids", (batch, seq_len), TensorProto.INT64)
    mask = g.input("attention_mask", (batch, seq_len), TensorProto.INT64)
    word = g.const(g.normal((vocab_size, hidden_size), STD), "word_emb")
    x = g.op("Gather", [word, ids.name], (batch, seq_len, hidden_size), axis=0)
    pos = g.const(g.normal((seq_len, hidden_size), STD) + g.normal((hidden_size,), STD), "pos")
    x = _layer_norm(g, g.binary("Add", x, pos))  # position + token-type-0 embeddings
    # (1 - mask) * -10000 as an additive (N, 1, 1, S) bias on the attention scores.
    m = g.op("Cast", [mask.name], mask.shape, to=TensorProto.FLOAT)
    m = g.op("Sub", [_scalar(g, 1.0), m.name], m.shape)
    m = g.reshape(g.binary("Mul", m, _scalar(g, -10000.0)), (batch, 1, 1, seq_len))
    for _ in range(num_layers):
        x = _encoder_layer(g, x, m, num_heads, intermediate_size)
    g.output(x, "last_hidden_state")
    first = g.op("Gather", [x.name, g.const(np.array(0, np.int64), "i")], (batch, hidden_size),
                 axis=1)  # fmt: skip
    g.output(g.act(g.dense(first, hidden_size, act="none"), "tanh"), "pooler_output")
