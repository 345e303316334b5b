"""LowerSlicesToBlockCopies: a split's row slices and concat become 2-D copies.

On the CPU pair the copy is a numpy copy of the same geometry, so these tests check the
rewritten VM code, the copy geometry against numpy slicing, and that answers stay the unsplit
model's (also on every split hypothesis draws: ``test_stage_cross_device_copies``, and on
chained zoo models here). On a CUDA GPU the same calls are ``cudaMemcpy2DAsync``
(``benchmarks/verify_models.py``, ``split_determinism.py``).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from test_stage_cross_device_copies import conv_model, extern_calls, rel_err
from tvm import relax

import codl_tvm
from codl_tvm import Plan, native, streams, zoo
from codl_tvm.passes.block_params import BLOCK_PARAMS_ATTR, on_whole_tensors
from codl_tvm.passes.lower_slices_to_block_copies import block_copy_args, row_block
from codl_tvm.passes.stage_cross_device_copies import COPY

PAIR = codl_tvm.DevicePair.preset("cpu-pair")


def kernels(exe) -> list[str]:
    names = []
    relax.analysis.post_order_visit(exe.mod["main"], lambda e: names.append(e.op.name_hint) if (
        isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.GlobalVar)) else None)
    return names


@pytest.mark.parametrize("implementation", [
    "python", pytest.param("native", marks=pytest.mark.skipif(
        native.compiler() is None, reason="no C++ compiler"))])
@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data())
def test_a_block_copy_moves_what_numpy_slicing_moves(implementation, shape, data):
    with streams.using(implementation):
        _copy_a_block(shape, data)


def _copy_a_block(shape: list[int], data) -> None:
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
    copies = codl_tvm.compile(mod, PAIR, plan, block_copies=True, block_in_kernels=False)
    after = codl_tvm.compile(mod, PAIR, plan, block_copies=True)
    assert before.manifest["block_copies"] is False  # off by default on the CPU pair
    assert any(k.startswith(("strided_slice", "concatenate")) for k in kernels(before))
    for exe in (copies, after):
        assert exe.manifest["block_copies"] is True
        assert not any(k.startswith(("strided_slice", "concatenate")) for k in kernels(exe))
        # the GPU tensor the CPU's part was copied into is gone with the concat
        assert len(exe.manifest["staging"]) == len(before.manifest["staging"])
    # rows to the CPU, rows within the GPU, and the two parts into the output
    assert extern_calls(copies).count(streams.COPY_BLOCK) == 4 and COPY not in extern_calls(copies)
    assert copies.manifest["kernels_on_whole_tensors"] == 0
    # the GPU's kernel reads its rows of the input and writes its rows of the output: the
    # CPU's rows out and its part in are the only copies, and nothing unused is built
    assert extern_calls(after).count(streams.COPY_BLOCK) == 2 and COPY not in extern_calls(after)
    assert after.manifest["kernels_on_whole_tensors"] == 1
    gpu_kernel = next(k for k in kernels(after) if k.endswith("_block0_d0"))
    assert gpu_kernel.startswith("fused_conv2d") and len(kernels(after)) == 2
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 13)).astype("float32")
    ref = codl_tvm.compile(mod, PAIR).run({"x": x})[0]
    for exe in (copies, after):
        assert rel_err(exe.run({"x": x})[0], ref) <= 1e-5


@settings(max_examples=25, deadline=None)
@given(h=st.integers(1, 9), axis=st.sampled_from([1, 2]), data=st.data())
def test_a_kernel_on_a_block_of_the_whole_tensor_computes_what_it_did_on_the_block(
        h, axis, data):
    # a conv + relu kernel as scheduled for the CPU, on a block of a bigger input and output
    mod = conv_model(4, 8, h, 3, 1, 1)
    func = next(f for f in codl_tvm.compile(mod, PAIR).mod.functions.values()
                if isinstance(f, tvm.tirx.PrimFunc) and "conv2d" in str(f.attrs["global_symbol"]))
    shapes = [[int(d) for d in p.shape] for p in func.params]
    first_in, first_out = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
    whole_in = [d + (first_in + 2 if i == axis else 0) for i, d in enumerate(shapes[0])]
    whole_out = [d + (first_out + 1 if i == axis else 0) for i, d in enumerate(shapes[-1])]
    blocks = {0: (whole_in, (axis, first_in, shapes[0][axis])),
              len(shapes) - 1: (whole_out, (axis, first_out, shapes[-1][axis]))}
    moved = on_whole_tensors(func, blocks)
    assert moved is not None and json.loads(moved.attrs[BLOCK_PARAMS_ATTR])["0"][:2] == [
        axis, first_in]
    rng = np.random.default_rng(h)
    x = rng.standard_normal(whole_in).astype("float32")
    args = [rng.standard_normal(s).astype("float32") for s in shapes[1:-1]]
    index_in = tuple(slice(first_in, first_in + shapes[0][axis]) if i == axis else slice(None)
                     for i in range(4))
    index_out = tuple(slice(first_out, first_out + shapes[-1][axis]) if i == axis
                      else slice(None) for i in range(4))
    target = tvm.target.Target(func.attrs["target"])

    def run(f, inp, out_shape):
        lib = tvm.tirx.build(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}),
                             target=target)
        out = tvm.runtime.tensor(np.full(out_shape, 7.0, "float32"))
        lib["main"](tvm.runtime.tensor(np.ascontiguousarray(inp)),
                    *map(tvm.runtime.tensor, args), out)
        return out.numpy()

    ref = run(func, x[index_in], shapes[-1])
    got = run(moved, x, whole_out)
    np.testing.assert_array_equal(got[index_out], ref)
    untouched = np.ones(whole_out, bool)
    untouched[index_out] = False
    assert (got[untouched] == 7.0).all()  # nothing written outside its block


def test_a_kernel_that_takes_a_pointer_of_a_tensor_is_not_moved():
    buf = tvm.tirx.decl_buffer((4,), "float32", name="a")
    out = tvm.tirx.decl_buffer((4,), "float32", name="b")
    body = tvm.tirx.Evaluate(tvm.tirx.call_extern("int32", "memcpy", out.data, buf.data, 16))
    func = tvm.tirx.PrimFunc([buf, out], body)
    assert on_whole_tensors(func, {0: ([8], (0, 2, 4))}) is None
    with pytest.raises(ValueError, match="is not block"):
        on_whole_tensors(func, {0: ([8], (0, 2, 3))})


def test_a_channel_split_written_in_place_is_left_alone():
    mod = conv_model(8, 16, 12, 3, 1, 1)
    exe = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "OC", 0.5), block_copies=True)
    assert exe.manifest["block_copies"] is False
    assert not any(k.startswith("concatenate") for k in kernels(exe))


def test_on_by_default_for_cuda_and_off_when_asked():
    pair = codl_tvm.DevicePair.preset("x86-cuda", arch="sm_90")
    assert pair.runs_block_copies and not PAIR.runs_block_copies
    mod = conv_model(8, 16, 12, 3, 1, 1)
    on = codl_tvm.compile(mod, pair, Plan.uniform(mod, "H", 0.5))
    assert on.manifest["block_copies"] is True and on.manifest["kernels_on_whole_tensors"] == 1
    off = codl_tvm.compile(mod, pair, Plan.uniform(mod, "H", 0.5), block_copies=False)
    assert off.manifest["block_copies"] is False
    assert codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "H", 0.5)).manifest[
        "block_copies"] is False  # the CPU pair runs them only when asked
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
        assert exe.manifest["kernels_on_whole_tensors"] > 0
        for _ in range(2):
            assert rel_err(exe.run(inputs)[0], ref) <= 1e-5


def test_a_depthwise_channel_split_reads_its_channels_of_the_whole_input():
    mod = conv_model(16, 16, 9, 3, 1, 16)
    x = np.random.default_rng(2).standard_normal((1, 16, 9, 10)).astype("float32")
    ref = codl_tvm.compile(mod, PAIR).run({"x": x})[0]
    exe = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "OC", 0.5), block_copies=True)
    assert exe.manifest["kernels_on_whole_tensors"] == 1
    assert not any(k.startswith("strided_slice") for k in kernels(exe))
    assert rel_err(exe.run({"x": x})[0], ref) <= 1e-5


@pytest.mark.parametrize("in_kernels", [False, True])
def test_with_overlap_each_part_goes_into_the_output_when_it_is_done(in_kernels):
    mod = conv_model(8, 16, 12, 3, 1, 1)
    exe = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "H", 0.5), overlap=True,
                           block_copies=True, block_in_kernels=in_kernels)
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
    if in_kernels:  # the GPU's kernel writes its rows of the output itself
        assert bs[gpu_part].value.args[-1].same_as(result)
        (cpu_copy,) = into_output
        # the CPU's rows go first, the GPU part is launched before the host waits for them
        assert copies[0] < gpu_part < names.index(streams.HOST_WAITS) < cpu_part < cpu_copy
    else:
        assert len(into_output) == 2
        gpu_copy, cpu_copy = into_output
        # the GPU part's rows are copied right after its kernel, before the CPU part runs
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
