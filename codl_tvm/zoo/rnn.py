"""2-layer LSTM and GRU with EOP's settings (seq_len 1, input_size 80, hidden 64).

TVM 0.27's Relax ONNX frontend has no LSTM/GRU/RNN converter, so the cells are unrolled
over time into MatMul/Add/Sigmoid/Tanh/Mul (PyTorch gate order and equations, one fused
MatMul for all gates of the input and one for the hidden state, then Split). Input
(N, T, input_size), batch first; output: the last layer's hidden states (N, T, hidden).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .layers import GraphBuilder, T

Cell = Callable[[GraphBuilder, T, list[T], tuple[str, ...]], list[T]]


def _step_input(g: GraphBuilder, x: T, t: int) -> T:
    """x[:, t, :] as Gather with a scalar index (the time axis disappears)."""
    idx = g.const(np.array(t, np.int64), "t")
    return g.op("Gather", [x.name, idx], (x.shape[0], x.shape[2]), axis=1)


def _gates(g: GraphBuilder, x: T, h: T, w: tuple[str, ...], n: int) -> tuple[list[T], list[T]]:
    hidden = h.shape[-1]
    gx = g.op("MatMul", [x.name, w[0]], (x.shape[0], n * hidden))
    gx = g.binary("Add", gx, w[1])
    gh = g.op("MatMul", [h.name, w[2]], (h.shape[0], n * hidden))
    gh = g.binary("Add", gh, w[3])
    return g.split(gx, n), g.split(gh, n)


def _lstm_cell(g: GraphBuilder, x: T, state: list[T], w: tuple[str, ...]) -> list[T]:
    h, c = state
    (xi, xf, xg, xo), (hi, hf, hg, ho) = _gates(g, x, h, w, 4)
    i = g.act(g.binary("Add", xi, hi), "sigmoid")
    f = g.act(g.binary("Add", xf, hf), "sigmoid")
    cand = g.act(g.binary("Add", xg, hg), "tanh")
    o = g.act(g.binary("Add", xo, ho), "sigmoid")
    c = g.binary("Add", g.binary("Mul", f, c), g.binary("Mul", i, cand))
    return [g.binary("Mul", o, g.act(c, "tanh")), c]


def _gru_cell(g: GraphBuilder, x: T, state: list[T], w: tuple[str, ...]) -> list[T]:
    (h,) = state
    (xr, xz, xn), (hr, hz, hn) = _gates(g, x, h, w, 3)
    r = g.act(g.binary("Add", xr, hr), "sigmoid")
    z = g.act(g.binary("Add", xz, hz), "sigmoid")
    n = g.act(g.binary("Add", xn, g.binary("Mul", r, hn)), "tanh")
    one = g.const(np.array(1.0, np.float32), "one")
    keep = g.binary("Mul", z, h)
    new = g.binary("Mul", g.op("Sub", [one, z.name], z.shape), n)
    return [g.binary("Add", new, keep)]


# name -> (cell, gates per cell, state tensors per cell)
CELLS: dict[str, tuple[Cell, int, int]] = {"lstm": (_lstm_cell, 4, 2), "gru": (_gru_cell, 3, 1)}


def build_rnn(
    g: GraphBuilder, batch: int, input_shape: tuple[int, ...], cell: str = "lstm",
    hidden_size: int = 64, num_layers: int = 2,
) -> None:  # fmt: skip
    """Stacked unrolled RNN; ``input_shape`` = (seq_len, input_size)."""
    fn, n_gates, n_state = CELLS[cell]
    seq_len, input_size = input_shape
    x = g.input("input", (batch, seq_len, input_size))
    steps = [_step_input(g, x, t) for t in range(seq_len)]
    bound = 1.0 / math.sqrt(hidden_size)  # PyTorch's U(-1/sqrt(H), 1/sqrt(H)) init
    for layer in range(num_layers):
        k = input_size if layer == 0 else hidden_size
        shapes = [(k, n_gates * hidden_size), (n_gates * hidden_size,)] * 2
        shapes[2] = (hidden_size, n_gates * hidden_size)
        w = tuple(
            g.const(g.rng.uniform(-bound, bound, s).astype(np.float32), f"l{layer}_w")
            for s in shapes
        )
        zeros = np.zeros((batch, hidden_size), np.float32)
        state = [T(g.const(zeros, "h0"), zeros.shape) for _ in range(n_state)]
        outs = []
        for xt in steps:
            state = fn(g, xt, state, w)
            outs.append(state[0])
        steps = outs
    seq = [g.op("Unsqueeze", [h.name, g.const(np.array([1], np.int64), "axes")],
                (batch, 1, hidden_size)) for h in steps]  # fmt: skip
    g.output(seq[0] if seq_len == 1 else g.concat(seq, axis=1), "output")
