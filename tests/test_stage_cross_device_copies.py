"""StageCrossDeviceCopies: CPU<->GPU copies go through staging parameters made once, and the
answer stays the unsplit model's on every split hypothesis draws (stride 2, one-row parts,
wide halos, depthwise), run after run with the same buffers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tvm
from helpers import const, single_function
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import relax

import codl_tvm
from codl_tvm.passes.stage_cross_device_copies import COPY, TO_DEVICE, VIEW

PAIR = codl_tvm.DevicePair.preset("cpu-pair")


def conv_model(c: int, oc: int, h: int, k: int, stride: int, groups: int, seed: int = 0):
    rng = np.random.default_rng(seed)

    def body(bb, x):
        y = relax.op.nn.conv2d(x, const(rng, (oc, c // groups, k, k)), strides=stride,
                               padding=k // 2, groups=groups)
        return relax.op.nn.relu(y)

    return codl_tvm.load_model(single_function((1, c, h, h + 1), body))


def extern_calls(exe) -> list[str]:
    names = []
    relax.analysis.post_order_visit(exe.mod["main"], lambda e: names.append(
        e.op.global_symbol) if isinstance(e, relax.Call) and isinstance(
        e.op, relax.ExternFunc) else None)
    return names


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def test_every_crossing_copy_is_staged():
    mod = conv_model(8, 16, 12, 3, 1, 1)
    exe = codl_tvm.compile(mod, PAIR, codl_tvm.Plan.uniform(mod, "H", 0.5))
    calls = extern_calls(exe)
    # one copy each way; the one to the CPU is waited for, and so is the previous run
    assert calls.count(COPY) == 2 and calls.count(TO_DEVICE) == 2
    assert [s["role"] for s in exe.manifest["staging"]] == ["cpu", "cpu"]
    # the CPU's input rows (half the output rows plus a one-row halo) and its output rows
    assert [s["shape"] for s in exe.manifest["staging"]] == [[1, 8, 7, 13], [1, 16, 6, 13]]
    plain = codl_tvm.compile(mod, PAIR, codl_tvm.Plan.uniform(mod, "H", 0.5), staging=False)
    assert extern_calls(plain).count(TO_DEVICE) == 2 and not plain.manifest["staging"]


def test_each_copy_to_the_cpu_is_waited_for_before_a_cpu_kernel_reads_it():
    # regression: TVM's TVMTensorCopyFromTo is a cudaMemcpyAsync, still in flight into a
    # pinned buffer when it returns; unsynchronised, CPU kernels read stale rows (split
    # ResNet-18 outputs differed from run to run on an H200)
    mod = conv_model(8, 16, 12, 3, 1, 1)
    exe = codl_tvm.compile(mod, PAIR, codl_tvm.Plan.uniform(mod, "OC", 0.5))
    staging = {s["name"] for s in exe.manifest["staging"]}
    bindings = [b for block in exe.mod["main"].body.blocks for b in block.bindings]
    views = {b.var: b.value.args[0] for b in bindings if isinstance(b.value, relax.Call)
             and isinstance(b.value.op, relax.ExternFunc)
             and b.value.op.global_symbol == VIEW}
    synced: set = set()
    first_sync = None
    for i, b in enumerate(bindings):
        v = b.value
        if not isinstance(v, relax.Call):
            continue
        if isinstance(v.op, relax.ExternFunc) and v.op.global_symbol == TO_DEVICE:
            assert v.args[0] in views  # a one-element view: a sync, not a data copy
            synced.add(views[v.args[0]])
            first_sync = i if first_sync is None else first_sync
        if isinstance(v.op, relax.ExternFunc) and v.op.global_symbol == COPY and (
                v.args[1].name in staging):
            nxt = bindings[i + 2].value  # the view, then the sync of the copy's source
            assert nxt.args[0].same_as(bindings[i + 1].var)
            assert views[bindings[i + 1].var].same_as(v.args[0])
    kernels = [i for i, b in enumerate(bindings) if isinstance(b.value, relax.Call)
               and isinstance(b.value.op, tvm.ir.GlobalVar)]
    assert first_sync is not None and first_sync < min(kernels)  # before any kernel of a run


def test_unsplit_models_have_no_staging():
    mod = conv_model(4, 4, 6, 3, 1, 1)
    assert codl_tvm.compile(mod, PAIR).manifest["staging"] == []


# overlap: also with OverlapCopies' rewrite (its stream functions do nothing on the CPU pair);
# block_copies: also with LowerSlicesToBlockCopies' (its copies are numpy copies on the CPU pair)
@pytest.mark.parametrize(("overlap", "block_copies"),
                         [(None, None), (True, None), (True, True), (False, True)])
@settings(max_examples=12, deadline=None)
@given(c=st.sampled_from([3, 8]), oc=st.sampled_from([8, 16]), h=st.integers(4, 14),
       k=st.sampled_from([1, 3, 5]), stride=st.sampled_from([1, 2]),
       depthwise=st.booleans(), dim=st.sampled_from(["H", "OC"]),
       ratio=st.sampled_from([0.1, 0.5, 0.93]))
def test_staged_splits_equal_the_unsplit_model_run_after_run(c, oc, h, k, stride, depthwise,
                                                            dim, ratio, overlap,
                                                            block_copies):
    if depthwise:
        oc = c
    mod = conv_model(c, oc, h, k, stride, c if depthwise else 1)
    ref_exe = codl_tvm.compile(mod, PAIR)
    with warnings.catch_warnings():  # a ratio that leaves a device no rows runs whole
        warnings.simplefilter("ignore")
        exe = codl_tvm.compile(mod, PAIR, codl_tvm.Plan.uniform(mod, dim, ratio),
                               overlap=overlap, block_copies=block_copies)
    rng = np.random.default_rng(h)
    for _ in range(3):  # the staging buffers are reused: each run must see only its input
        x = rng.standard_normal((1, c, h, h + 1)).astype("float32")
        assert rel_err(exe.run({"x": x})[0], ref_exe.run({"x": x})[0]) <= 1e-5



def test_outputs_are_never_staging_buffers():
    """A copy whose result main returns keeps TVM's to_device: a staging buffer is reused by
    the next run, so an output held by the caller would change under it."""
    mod = conv_model(4, 8, 6, 3, 1, 1)
    plan = codl_tvm.Plan.single(mod, "gpu")
    plan.io_device = "cpu"  # inputs and outputs on the CPU, the op on the GPU
    exe = codl_tvm.compile(mod, PAIR, plan)
    assert TO_DEVICE in extern_calls(exe)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 4, 6, 7)).astype("float32") for _ in range(2)]
    first = exe.runner.vm["main"](*exe.runner._args({"x": xs[0]}))
    kept = first.numpy().copy()
    exe.runner.vm["main"](*exe.runner._args({"x": xs[1]}))
    np.testing.assert_array_equal(first.numpy(), kept)
