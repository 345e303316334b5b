"""LowerSlicesToBlockCopies: a split's row slices and concat become 2-D copies.

On the CPU pair the copy is a numpy copy of the same geometry, so these tests check the
rewritten VM code, the copy geometry against numpy slicing, and that answers stay the unsplit
model's (also on every split hypothesis draws: ``test_stage_cross_device_copies``, and on
chained zoo models here). On a CUDA GPU the same calls are ``cudaMemcpy2DAsync``
(``benchmarks/verify_models.py``, ``split_determinism.py``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from test_stage_cross_device_copies import conv_model, extern_calls, rel_err
from tvm import relax

import codl_tvm
from codl_tvm import Plan, streams, zoo
from codl_tvm.passes.lower_slices_to_block_copies import block_copy_args, row_block
from codl_tvm.passes.stage_cross_device_copies import COPY

PAIR = codl_tvm.DevicePair.preset("cpu-pair")


def kernels(exe) -> list[str]:
    names = []
    relax.analysis.post_order_visit(exe.mod["main"], lambda e: names.append(e.op.name_hint) if (
        isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.GlobalVar)) else None)
    return names


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data())
def test_a_block_copy_moves_what_numpy_slicing_moves(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    first = data.draw(st.integers(0, shape[axis] - 1))
    length = data.draw(st.integers(1, shape[axis] - first))
    whole = np.arange(np.prod(shape), dtype="float32").reshape(shape)
    index = tuple(slice(first, first + length) if i == axis else slice(None)
                  for i in range(len(shape)))
    copy = tvm.get_global_func(streams.COPY_BLOCK)
    block = tvm.runtime.empty(whole[index].shape, "float32", tvm.cpu())
    copy(tvm.runtime.tensor(whole), block, *block_copy_args(shape, (axis, first, length), 4,
                                                             into=False))
    np.testing.assert_array_equal(block.numpy(), whole[index])
    into = tvm.runtime.tensor(np.zeros(shape, "float32"))
    copy(block, into, *block_copy_args(shape, (axis, first, length), 4, into=True))
    expected = np.zeros(shape, "float32")
    expected[index] = whole[index]
    np.testing.assert_array_equal(into.numpy(), expected)


def _prim_func(name: str, *args) -> tvm.tirx.PrimFunc:
    mod = codl_tvm.load_model(_module(name, *args))
    lowered = tvm.transform.Sequential([relax.transform.LegalizeOps()])(mod)
    return next(f for gv, f in lowered.functions.items() if isinstance(f, tvm.tirx.PrimFunc))


def _module(name: str, *args) -> tvm.IRModule:
    from helpers import single_function

    return single_function((1, 4, 9, 5), lambda bb, x: getattr(relax.op, name)(x, *args))


def test_row_block_reads_the_slice_from_the_kernel_and_rejects_other_kernels():
    assert row_block(_prim_func("strided_slice", [2], [3], [8])) == (
        [1, 4, 9, 5], [1, 4, 5, 5], (2, 3, 5))
    assert row_block(_prim_func("strided_slice", [2], [1], [9], [2])) is None  # step 2
    assert row_block(_prim_func("flip", 2)) is None  # same shape, reversed rows


def test_a_row_split_has_no_slice_or_concat_kernel_left():
    mod = conv_model(8, 16, 12, 3, 1, 1)
    plan = Plan.uniform(mod, "H", 0.5)
    before = codl_tvm.compile(mod, PAIR, plan)
    after = codl_tvm.compile(mod, PAIR, plan, block_copies=True)
    assert before.manifest["block_copies"] is False  # off by default on the CPU pair
    assert any(k.startswith(("strided_slice", "concatenate")) for k in kernels(before))
    assert after.manifest["block_copies"] is True
    assert not any(k.startswith(("strided_slice", "concatenate")) for k in kernels(after))
    calls = extern_calls(after)
    # rows to the CPU, rows within the GPU, and the two parts into the output
    assert calls.count(streams.COPY_BLOCK) == 4 and COPY not in calls
    # the GPU tensor the CPU's part was copied into is gone with the concat
    assert len(after.manifest["staging"]) == len(before.manifest["staging"])


def test_a_channel_split_written_in_place_is_left_alone():
    mod = conv_model(8, 16, 12, 3, 1, 1)
    exe = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "OC", 0.5), block_copies=True)
    assert exe.manifest["block_copies"] is False
    assert not any(k.startswith("concatenate") for k in kernels(exe))


def test_off_by_default_and_built_for_cuda_when_asked():
    pair = codl_tvm.DevicePair.preset("x86-cuda", arch="sm_90")
    assert pair.runs_block_copies and not PAIR.runs_block_copies
    mod = conv_model(8, 16, 12, 3, 1, 1)
    assert codl_tvm.compile(mod, pair, Plan.uniform(mod, "H", 0.5)).manifest[
        "block_copies"] is False
    on = codl_tvm.compile(mod, pair, Plan.uniform(mod, "H", 0.5), block_copies=True)
    assert on.manifest["block_copies"] is True
    opencl = codl_tvm.DevicePair.preset("android-opencl")
    with pytest.raises(ValueError, match="block_copies needs a CUDA GPU"):
        codl_tvm.compile(mod, opencl, Plan.uniform(mod, "H", 0.5), block_copies=True)


# chained row splits: slices and concats at the chains' ends, halos across pools and strides
@pytest.mark.parametrize(("name", "shape"), [("tiny-cnn", None), ("yolo-v2", (64, 64)),
                                             ("fast-style-transfer", (32, 32))])
def test_chained_zoo_splits_equal_the_unsplit_model(name, shape, tmp_path):
    kwargs = {"input_shape": shape} if shape else {}
    mod = codl_tvm.load_model(zoo.get(name, cache_dir=tmp_path, **kwargs))
    unsplit = codl_tvm.compile(mod, PAIR)
    inputs = zoo.sample_inputs(name, seed=0, **kwargs)
    ref = unsplit.run(inputs)[0]
    for ratio, chain in ((0.5, True), (0.8, False)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            exe = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "H", ratio, chain=chain),
                                   overlap=True, block_copies=True)
        assert exe.manifest["block_copies"] is True
        for _ in range(2):
            assert rel_err(exe.run(inputs)[0], ref) <= 1e-5


def test_with_overlap_each_part_goes_into_the_output_when_it_is_done():
    mod = conv_model(8, 16, 12, 3, 1, 1)
    exe = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "H", 0.5), overlap=True,
                           block_copies=True)
    bs = [b for block in exe.mod["main"].body.blocks for b in block.bindings]

    def name(b):
        v = b.value
        if isinstance(v, relax.Call) and isinstance(v.op, relax.ExternFunc):
            return v.op.global_symbol
        if isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.GlobalVar):
            return v.op.name_hint
        return None

    names = [name(b) for b in bs]
    copies = [i for i, n in enumerate(names) if n == streams.COPY_BLOCK]
    cpu_part = next(i for i, n in enumerate(names) if n and n.endswith("_d1"))
    gpu_part = next(i for i, n in enumerate(names) if n and n.startswith("fused_conv2d")
                    and n.endswith("_d0"))
    result = exe.mod["main"].body.body
    into_output = [i for i in copies if bs[i].value.args[1].same_as(result)]
    assert len(into_output) == 2
    gpu_copy, cpu_copy = into_output
    # the GPU part's rows are copied right after its kernel, before the host runs the CPU part
    assert gpu_part < gpu_copy < names.index(streams.HOST_WAITS) < cpu_part < cpu_copy
    # the output was allocated before the CPU part: its copy waits for no kernel
    assert names[cpu_copy - 1] != streams.COPIES_WAIT
    assert names[cpu_copy + 1] == streams.KERNELS_WAIT


@pytest.mark.parametrize("overlap", [False, True])
def test_rows_are_copied_before_the_tensor_they_come_from_is_freed(overlap, tmp_path):
    # regression: the copy of the CPU's rows replaced the copy of their slice, where the whole
    # tensor (a block's input, read last by that slice) was already freed: ResNet-18's
    # stride-2 shortcut convs split alone by rows read a freed tensor
    shape = {"input_shape": (32, 32)}
    mod = codl_tvm.load_model(zoo.get("resnet-18", cache_dir=tmp_path, **shape))
    inputs = zoo.sample_inputs("resnet-18", seed=0, **shape)
    ref = codl_tvm.compile(mod, PAIR).run(inputs)[0]
    split = Plan.uniform(mod, "H", 0.5)
    for op in ("conv2d_7", "conv2d_12"):
        plan = Plan.single(mod, "gpu")
        plan.ops[op] = split.ops[op]
        exe = codl_tvm.compile(mod, PAIR, plan, overlap=overlap, block_copies=True)
        assert exe.manifest["block_copies"] is True
        for _ in range(2):
            assert rel_err(exe.run(inputs)[0], ref) <= 1e-5, op
