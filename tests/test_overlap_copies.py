"""OverlapCopies: kernels on a stream of their own, every copy ordered by the waits it needs.

The stream functions do nothing on CPU devices, so on the CPU pair these tests check the
rewritten VM code's order and that the answer stays the unsplit model's (also on every split
hypothesis draws: ``test_stage_cross_device_copies``); the orders' effect
on a CUDA GPU is checked there (``benchmarks/verify_models.py``, ``split_determinism.py``).
"""

from __future__ import annotations

import numpy as np
import tvm
from test_stage_cross_device_copies import conv_model, rel_err
from tvm import relax

import codl_tvm
from codl_tvm import streams
from codl_tvm.passes.stage_cross_device_copies import COPY, KILL, TO_DEVICE, VIEW

PAIR = codl_tvm.DevicePair.preset("cpu-pair")


def bindings(exe) -> list[relax.Binding]:
    return [b for block in exe.mod["main"].body.blocks for b in block.bindings]


def extern(b: relax.Binding) -> str | None:
    v = b.value
    if isinstance(v, relax.Call) and isinstance(v.op, relax.ExternFunc):
        return v.op.global_symbol
    return None


def cpu_kernel(exe, b: relax.Binding) -> bool:
    v = b.value
    if not (isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.GlobalVar)):
        return False
    return exe.mod[v.op].attrs["target"].kind.name == "llvm" and v.op.name_hint.endswith("d1")


def compiled(dim: str, overlap: bool = True, c: int = 8, oc: int = 16):
    mod = conv_model(c, oc, 12, 3, 1, 1)
    plan = codl_tvm.Plan.uniform(mod, dim, 0.5)
    return mod, codl_tvm.compile(mod, PAIR, plan, overlap=overlap)


def test_off_by_default_on_the_cpu_pair_and_recorded():
    _, exe = compiled("H", overlap=None)
    assert exe.manifest["overlap"] is False
    assert streams.BEGIN not in [extern(b) for b in bindings(exe)]
    assert codl_tvm.compile(conv_model(4, 4, 6, 3, 1, 1), PAIR).manifest["overlap"] is False


def check_waits(exe) -> None:
    """Every copy has the waits it needs (see the pass's module doc)."""
    bs = bindings(exe)
    names = [extern(b) for b in bs]
    assert exe.manifest["overlap"] is True
    # (VMShapeLower's parameter checks come before BEGIN; they touch no data)
    first_data = min(i for i, b in enumerate(bs) if names[i] == COPY or (
        isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.GlobalVar)))
    assert names.index(streams.BEGIN) < first_data
    assert [n for n in names if n and n.startswith("codl.streams")][-1] == streams.END
    assert TO_DEVICE not in names  # the one-stream syncs are gone
    staged = {s["name"]: s["role"] for s in exe.manifest["staging"]}
    aliases = {b.var: b.value for b in bs if isinstance(b.value, relax.Var)}
    for i, b in enumerate(bs):
        if names[i] != COPY:
            continue
        src, dst = b.value.args
        if staged.get(dst.name) == "cpu":  # a download
            assert names[i - 1] == streams.COPIES_WAIT
            wait = names.index(streams.HOST_WAITS, i)
            readers = [j for j in range(i, len(bs)) if cpu_kernel(exe, bs[j]) and any(
                a.same_as(dst) or aliases.get(a, None) is not None and aliases[a].same_as(dst)
                for a in bs[j].value.args)]
            assert readers and wait < readers[0]
            # its source stays allocated until the host has waited for the copy
            assert not any(names[j] is None and isinstance(bs[j].value, relax.Call)
                           and bs[j].value.op.same_as(KILL)
                           and bs[j].value.args[0].same_as(src) for j in range(i, wait))
            # and after every write into its memory (the tail of an in-place output)
            views = {c.var for c in bs if extern(c) == VIEW and c.value.args[0].same_as(src)}
            assert not any(names[j] == COPY and bs[j].value.args[1] in views
                           for j in range(i, len(bs)))
        else:  # an upload: the kernels after it wait for it
            assert names[i + 1] == streams.KERNELS_WAIT


def test_every_wait_sits_where_a_copy_needs_it():
    for dim in ("H", "OC"):
        check_waits(compiled(dim)[1])


def test_a_dense_layer_after_a_flatten_waits_for_its_input():
    # regression: the copy of a reshaped (flattened) tensor was not recognised as a copy from
    # the GPU, so nothing waited for it (ResNet-18's and tiny-cnn's dense layers split by
    # channels differed from run to run on an H200)
    from codl_tvm import zoo

    mod = zoo.import_relax("tiny-cnn")
    split = codl_tvm.Plan.uniform(mod, "OC", 0.75)
    dense = next(op for op in split.ops if op.startswith("matmul"))
    plan = codl_tvm.Plan.single(mod, "gpu")
    plan.ops[dense] = split.ops[dense]
    exe = codl_tvm.compile(mod, PAIR, plan, overlap=True)
    assert "vm.builtin.reshape" in [extern(b) for b in bindings(exe)]
    check_waits(exe)
    ref = codl_tvm.compile(mod, PAIR)
    x = ref.runner.random_inputs(2)
    assert rel_err(exe.run(x)[0], ref.run(x)[0]) <= 1e-5


def test_a_split_reading_a_split_output_copies_it_after_both_halves_are_written():
    # regression: the copy of an in-place output (GPU head + uploaded tail) to the CPU was
    # moved before the upload of its tail (tiny-cnn split by channels everywhere differed
    # from run to run on an H200)
    from codl_tvm import zoo

    mod = zoo.import_relax("tiny-cnn")
    exe = codl_tvm.compile(mod, PAIR, codl_tvm.Plan.uniform(mod, "OC", 0.75), overlap=True)
    check_waits(exe)
    ref = codl_tvm.compile(mod, PAIR)
    x = ref.runner.random_inputs(3)
    assert rel_err(exe.run(x)[0], ref.run(x)[0]) <= 1e-5


def test_the_gpu_part_is_launched_before_the_host_waits():
    _, exe = compiled("OC")
    bs = bindings(exe)
    names = [extern(b) for b in bs]
    gpu_part = next(i for i, b in enumerate(bs) if isinstance(b.value, relax.Call)
                    and isinstance(b.value.op, tvm.ir.GlobalVar)
                    and b.value.op.name_hint.startswith("fused_conv2d")
                    and b.value.op.name_hint.endswith("d0"))
    assert gpu_part < names.index(streams.HOST_WAITS)


def test_row_split_uploads_land_in_gpu_buffers_of_their_own():
    # a pooled destination could reuse memory a kernel still reads on the kernel stream
    _, exe = compiled("H")
    roles = [s["role"] for s in exe.manifest["staging"]]
    assert roles == ["cpu", "cpu", "gpu"]
    _, plain = compiled("H", overlap=False)
    assert [s["role"] for s in plain.manifest["staging"]] == ["cpu", "cpu"]


def test_the_copy_to_the_cpu_goes_right_after_its_slice():
    # the CPU's rows are sliced first and copied at once, not behind the GPU's slice
    _, exe = compiled("H")
    bs = bindings(exe)
    names = [extern(b) for b in bs]
    kernels = [i for i, b in enumerate(bs) if isinstance(b.value, relax.Call)
               and isinstance(b.value.op, tvm.ir.GlobalVar)]
    assert names.index(COPY) < kernels[1]


def test_a_whole_zoo_model_split_everywhere_still_equals_its_unsplit_self():
    from codl_tvm import zoo

    mod = zoo.import_relax("tiny-cnn")
    ref = codl_tvm.compile(mod, PAIR)
    exe = codl_tvm.compile(mod, PAIR, codl_tvm.Plan.uniform(mod, "H", 0.5, chain=True),
                           overlap=True)
    x = ref.runner.random_inputs(1)
    assert rel_err(exe.run(x)[0], ref.run(x)[0]) <= 1e-5


def test_the_stream_functions_are_registered_by_the_runner_and_do_nothing_on_a_cpu():
    import codl_tvm.runtime  # noqa: F401 - what loads an artifact registers them

    t = tvm.runtime.tensor(np.zeros(4, "float32"), tvm.cpu())
    for name in streams.FUNCTIONS:
        if name != streams.COPY_BLOCK:
            tvm.get_global_func(name)(t)  # the VM calls each with a tensor of the GPU
    assert np.all(t.numpy() == 0)
    assert tvm.get_global_func(streams.COPY_BLOCK) is not None
