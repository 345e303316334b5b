"""CombineParallelDense: dense layers reading one input become one matmul and a split."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import tvm
from hypothesis import HealthCheck, given, settings
from tvm import relax

from codl_tvm import zoo
from codl_tvm.passes import CombineParallelDense

X = relax.TensorType((1, 5, 8), "float32")


def _weights(widths, biases, seed=0):
    rng = np.random.default_rng(seed)
    ws = [rng.standard_normal((8, n)).astype("float32") for n in widths]
    bs = [rng.standard_normal((n,)).astype("float32") if b else None
          for n, b in zip(widths, biases)]
    return ws, bs


def _before(ws, bs, k_of=None):
    """``concat(x @ W_i (+ b_i))``; ``k_of`` (optional) gives layer i its own input."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", X)
    y = relax.Var("y", X)
    with bb.function("main", [x, y]):
        with bb.dataflow():
            outs = []
            for i, (w, b) in enumerate(zip(ws, bs)):
                src = y if k_of and k_of[i] else x
                v = bb.emit(relax.op.matmul(src, relax.const(w)))
                outs.append(bb.emit(relax.op.add(v, relax.const(b))) if b is not None else v)
            gv = bb.emit_output(relax.op.concat(outs, axis=-1))
        bb.emit_func_output(gv)
    return bb.get()


def _run(mod, x, y):
    ex = tvm.compile(mod, "llvm")
    return relax.VirtualMachine(ex, tvm.cpu())["main"](x, y).numpy()


def test_qkv_with_biases_is_one_matmul_one_add_and_a_split():
    ws, bs = _weights((6, 6, 4), (True, True, True))
    bb = relax.BlockBuilder()
    x, y = relax.Var("x", X), relax.Var("y", X)
    with bb.function("main", [x, y]):
        with bb.dataflow():
            v = bb.emit(relax.op.matmul(x, relax.const(np.concatenate(ws, axis=1))))
            v = bb.emit(relax.op.add(v, relax.const(np.concatenate(bs))))
            parts = bb.emit(relax.op.split(v, [6, 12], axis=-1))
            outs = [bb.emit(relax.TupleGetItem(parts, i)) for i in range(3)]
            gv = bb.emit_output(relax.op.concat(outs, axis=-1))
        bb.emit_func_output(gv)
    tvm.ir.assert_structural_equal(CombineParallelDense()(_before(ws, bs)), bb.get())


def test_a_layer_without_bias_keeps_every_add_on_its_part():
    ws, bs = _weights((6, 4), (True, False))
    bb = relax.BlockBuilder()
    x, y = relax.Var("x", X), relax.Var("y", X)
    with bb.function("main", [x, y]):
        with bb.dataflow():
            v = bb.emit(relax.op.matmul(x, relax.const(np.concatenate(ws, axis=1))))
            parts = bb.emit(relax.op.split(v, [6], axis=-1))
            q = bb.emit(relax.TupleGetItem(parts, 0))
            k = bb.emit(relax.TupleGetItem(parts, 1))
            q = bb.emit(relax.op.add(q, relax.const(bs[0])))
            gv = bb.emit_output(relax.op.concat([q, k], axis=-1))
        bb.emit_func_output(gv)
    tvm.ir.assert_structural_equal(CombineParallelDense()(_before(ws, bs)), bb.get())


def test_layers_on_different_inputs_stay_apart():
    ws, bs = _weights((6, 4), (True, True))
    before = _before(ws, bs, k_of=[0, 1])
    tvm.ir.assert_structural_equal(CombineParallelDense()(before), before)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(widths=st.lists(st.integers(1, 9), min_size=2, max_size=4),
       biases=st.lists(st.booleans(), min_size=4, max_size=4), shared=st.booleans())
def test_outputs_do_not_change(widths, biases, shared):
    ws, bs = _weights(widths, biases[:len(widths)])
    before = _before(ws, bs, k_of=None if shared else [i % 2 for i in range(len(ws))])
    rng = np.random.default_rng(1)
    x, y = (tvm.runtime.tensor(rng.standard_normal((1, 5, 8)).astype("float32"))
            for _ in range(2))
    np.testing.assert_array_equal(_run(CombineParallelDense()(before), x, y),
                                  _run(before, x, y))


def test_bert_projects_q_k_v_with_one_matmul_per_layer():
    # the zoo loads through the prepare phase, which runs the pass: 12 layers x (QKV combined
    # + output + 2 FFN) + 2 attention matmuls each + the pooler = 73 matmuls (97 before)
    text = zoo.load("bert-base")["main"].script(show_meta=False)
    assert text.count("R.matmul(") == 73 and text.count("R.split(") == 12
