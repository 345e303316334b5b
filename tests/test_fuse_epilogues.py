"""FuseEpilogues: elementwise ops run inside the kernel before them; nothing else fuses."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from helpers import const, rel_err, single_function
from tvm import relax
from tvm.relax import op as rop
from tvm.relax import transform as rt

import codl_tvm
from codl_tvm.passes import FuseEpilogues
from codl_tvm.plan import Plan


def _kernels(mod: tvm.IRModule) -> list[str]:
    names: list[str] = []

    def visit(node: object) -> None:
        if isinstance(node, relax.Call) and node.op.same_as(tvm.ir.Op.get("relax.call_tir")):
            names.append(node.args[0].name_hint)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return names


def _fused(body, shape=(1, 4, 8, 8)) -> list[str]:
    mod = single_function(shape, body)
    return _kernels(FuseEpilogues()(rt.LegalizeOps()(mod)))


def test_conv_bias_and_clip_are_one_kernel() -> None:
    rng = np.random.default_rng(0)

    def body(bb, x):
        y = bb.emit(rop.nn.conv2d(x, const(rng, (8, 4, 3, 3)), padding=(1, 1, 1, 1)))
        y = bb.emit(rop.add(y, const(rng, (1, 8, 1, 1))))
        return rop.clip(y, 0.0, 6.0)

    assert len(_fused(body)) == 1


def test_slices_and_concats_stay_kernels_of_their_own() -> None:
    # TVM calls strided_slice elementwise; fused after the conv it would change the conv's
    # output shape and hide the split's slice from the staging passes
    rng = np.random.default_rng(1)

    def body(bb, x):
        y = bb.emit(rop.nn.conv2d(x, const(rng, (8, 4, 1, 1))))
        top = bb.emit(rop.strided_slice(y, [2], [0], [4]))
        both = bb.emit(rop.concat([top, top], axis=2))
        return rop.nn.relu(both)

    names = _fused(body)
    assert len(names) == 4
    assert any(n.startswith("strided_slice") for n in names)
    assert any(n.startswith("concatenate") for n in names)


def test_residual_add_and_relu_join_the_second_conv() -> None:
    rng = np.random.default_rng(2)

    def body(bb, x):
        y = bb.emit(rop.nn.relu(bb.emit(rop.nn.conv2d(x, const(rng, (4, 4, 1, 1))))))
        z = bb.emit(rop.nn.conv2d(y, const(rng, (4, 4, 1, 1))))
        return rop.nn.relu(bb.emit(rop.add(z, x)))

    assert len(_fused(body)) == 2


@pytest.mark.parametrize("dim", ["H", "OC"])
def test_fused_split_model_equals_unfused(dim) -> None:
    rng = np.random.default_rng(3)

    def body(bb, x):
        y = bb.emit(rop.nn.conv2d(x, const(rng, (6, 3, 3, 3)), strides=2, padding=(1,) * 4))
        y = bb.emit(rop.nn.leakyrelu(bb.emit(rop.add(y, const(rng, (1, 6, 1, 1)))), 0.1))
        y = bb.emit(rop.nn.max_pool2d(y, (2, 2), (2, 2)))
        return rop.clip(bb.emit(rop.multiply(y, const(rng, (1, 6, 1, 1)))), 0.0, 6.0)

    mod = codl_tvm.load_model(single_function((1, 3, 17, 13), body))
    pair = codl_tvm.DevicePair.preset("cpu-pair")
    plan = Plan.uniform(mod, dim, 0.6)
    x = {"x": rng.standard_normal((1, 3, 17, 13)).astype("float32")}
    fused = codl_tvm.compile(mod, pair, plan)
    plain = codl_tvm.compile(mod, pair, plan, fuse=False)
    assert fused.kernel_calls() < plain.kernel_calls()
    assert rel_err(fused.run(x)[0], plain.run(x)[0]) <= 1e-5
