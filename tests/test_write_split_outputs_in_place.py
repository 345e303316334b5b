"""WriteSplitOutputsInPlace: an output-channel split of a batch-1 tensor writes its two parts
into the output directly (no concatenate kernel); a row split keeps the kernel. The answers
are checked against the unsplit model in test_stage_cross_device_copies.py (same pipeline)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from test_stage_cross_device_copies import PAIR, conv_model, extern_calls, rel_err
from tvm import relax

import codl_tvm
from codl_tvm.passes.stage_cross_device_copies import TO_DEVICE
from codl_tvm.passes.write_split_outputs_in_place import VIEW


def kernels(exe) -> list[str]:
    names = []
    relax.analysis.post_order_visit(exe.mod["main"], lambda e: names.append(
        e.op.name_hint) if isinstance(e, relax.Call) and isinstance(
        e.op, tvm.ir.GlobalVar) else None)
    return names


def test_channel_split_writes_both_parts_into_the_output():
    mod = conv_model(8, 16, 10, 3, 1, 1)
    exe = codl_tvm.compile(mod, PAIR, codl_tvm.Plan.uniform(mod, "OC", 0.6))
    assert not [k for k in kernels(exe) if k.startswith("concatenate")]
    calls = extern_calls(exe)  # besides the syncs' one-element views (one per to_device)
    assert calls.count(VIEW) - calls.count(TO_DEVICE) == 2
    x = np.random.default_rng(0).standard_normal((1, 8, 10, 11)).astype("float32")
    assert rel_err(exe.run({"x": x})[0], codl_tvm.compile(mod, PAIR).run({"x": x})[0]) <= 1e-5


def test_row_split_keeps_the_concatenate_kernel():
    mod = conv_model(8, 16, 10, 3, 1, 1)
    exe = codl_tvm.compile(mod, PAIR, codl_tvm.Plan.uniform(mod, "H", 0.6))
    assert [k for k in kernels(exe) if k.startswith("concatenate")]
    calls = extern_calls(exe)
    assert calls.count(VIEW) == calls.count(TO_DEVICE)  # the syncs' views only


@pytest.mark.parametrize("oc,dim", [(16, "OC"), (16, "H"), (1, "H")])
def test_the_cost_models_know_which_splits_join_in_place(oc, dim):
    """Planner, explain and the sharing model skip the concat cost exactly where the pass
    drops the kernel (OpSpec.joins_in_place)."""
    from codl_tvm.explain import model_op_specs

    mod = conv_model(8, oc, 10, 3, 1, 1)
    exe = codl_tvm.compile(mod, PAIR, codl_tvm.Plan.uniform(mod, dim, 0.6))
    (spec,) = [s for _, s in model_op_specs(mod, "m") if s is not None and s.kind == "conv2d"]
    dropped = not [k for k in kernels(exe) if k.startswith("concatenate")]
    assert spec.joins_in_place(dim) == dropped
