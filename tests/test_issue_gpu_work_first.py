"""IssueGpuWorkFirst: TVMScript Before/Expected; the answer stays the unsplit model's."""

from __future__ import annotations

import numpy as np
import tvm
from helpers import conv, reference, rel_err, single_function
from hypothesis import given, settings
from hypothesis import strategies as st
from test_compile_targets import _calls
from tvm.relax import op as rop
from tvm.script import ir as I
from tvm.script import relax as R

import codl_tvm
from codl_tvm.passes import IssueGpuWorkFirst
from codl_tvm.plan import OpPlacement, Plan
from codl_tvm.planner.branches import parallel_branches
from codl_tvm.planner.opgraph import build_graph

# vdevice 0: a CUDA GPU, vdevice 1: the host's CPU (nothing here runs on a GPU)
VDEVICES = {"vdevice": [I.vdevice({"kind": "cuda", "arch": "sm_90"}, 0, "global"),
                        I.vdevice({"kind": "llvm"}, 0, "global")]}


def test_the_gpu_branch_is_issued_before_the_cpu_branch_computes():
    @I.ir_module
    class Before:
        I.module_global_infos(VDEVICES)

        @R.function
        def main(x: R.Tensor((4,), "float32", "cuda:0")):
            with R.dataflow():
                a = R.to_vdevice(x, "llvm:0")
                b = R.add(a, a)  # the CPU's branch
                c = R.multiply(x, x)  # the GPU's branch
                d = R.to_vdevice(b, "cuda:0")
                e = R.add(c, d)
                R.output(e)
            return e

    @I.ir_module
    class Expected:
        I.module_global_infos(VDEVICES)

        @R.function
        def main(x: R.Tensor((4,), "float32", "cuda:0")):
            with R.dataflow():
                a = R.to_vdevice(x, "llvm:0")
                c = R.multiply(x, x)
                b = R.add(a, a)
                d = R.to_vdevice(b, "cuda:0")
                e = R.add(c, d)
                R.output(e)
            return e

    tvm.ir.assert_structural_equal(IssueGpuWorkFirst()(Before), Expected)


def test_copies_to_the_host_come_first_then_gpu_work_in_order():
    @I.ir_module
    class Before:
        I.module_global_infos(VDEVICES)

        @R.function
        def main(x: R.Tensor((4,), "float32", "cuda:0")):
            with R.dataflow():
                g1 = R.multiply(x, x)
                h = R.add(x, x)  # a GPU op the host's branch reads
                a = R.to_vdevice(h, "llvm:0")
                b = R.add(a, a)
                g2 = R.multiply(g1, g1)
                d = R.to_vdevice(b, "cuda:0")
                e = R.add(g2, d)
                R.output(e)
            return e

    @I.ir_module
    class Expected:
        I.module_global_infos(VDEVICES)

        @R.function
        def main(x: R.Tensor((4,), "float32", "cuda:0")):
            with R.dataflow():
                g1 = R.multiply(x, x)
                h = R.add(x, x)
                a = R.to_vdevice(h, "llvm:0")
                g2 = R.multiply(g1, g1)
                b = R.add(a, a)
                d = R.to_vdevice(b, "cuda:0")
                e = R.add(g2, d)
                R.output(e)
            return e

    tvm.ir.assert_structural_equal(IssueGpuWorkFirst()(Before), Expected)


def test_a_chain_and_a_pair_of_cpus_keep_their_order():
    @I.ir_module
    class Chain:
        I.module_global_infos(VDEVICES)

        @R.function
        def main(x: R.Tensor((4,), "float32", "cuda:0")):
            with R.dataflow():
                a = R.to_vdevice(x, "llvm:0")
                b = R.add(a, a)
                c = R.to_vdevice(b, "cuda:0")
                d = R.multiply(c, c)
                R.output(d)
            return d

    tvm.ir.assert_structural_equal(IssueGpuWorkFirst()(Chain), Chain)

    @I.ir_module
    class CpuPair:
        I.module_global_infos({"vdevice": [I.vdevice({"kind": "llvm"}, 1, "global"),
                                           I.vdevice({"kind": "llvm"}, 0, "global")]})

        @R.function
        def main(x: R.Tensor((4,), "float32", "llvm:0")):
            with R.dataflow():
                a = R.to_vdevice(x, "llvm:1")
                b = R.add(a, a)
                c = R.multiply(x, x)
                d = R.to_vdevice(b, "llvm:0")
                e = R.add(c, d)
                R.output(e)
            return e

    tvm.ir.assert_structural_equal(IssueGpuWorkFirst()(CpuPair), CpuPair)


def towers(rng: np.random.Generator, c: int = 6, hw: int = 9) -> tvm.IRModule:
    """x (``c`` channels, ``hw`` x ``hw``) -> four towers (conv 1x1; conv 1x1 -> conv 3x3;
    max pool -> conv 1x1; conv 3x3) -> concat, as an inception block."""

    def body(bb, x):
        a = conv(bb, x, rng, 4, 1, bias=True)
        b = conv(bb, conv(bb, x, rng, 3, 1), rng, 5, 3, padding=(1, 1, 1, 1))
        p = bb.emit(rop.nn.max_pool2d(x, pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1)))
        c = conv(bb, p, rng, 2, 1)
        d = conv(bb, x, rng, 3, 3, padding=(1, 1, 1, 1))
        return rop.concat([a, b, c, d], axis=1)

    return single_function((1, c, hw, hw), body)


def _on_cpu(mod: tvm.IRModule, towers_on_cpu: tuple[int, ...]) -> Plan:
    """The towers ``towers_on_cpu`` (by position) whole on the CPU, the rest on the GPU."""
    mg = build_graph(mod)
    groups = parallel_branches(mg.nodes)
    assert [len(b) for b in groups[0]] == [1, 2, 2, 1]  # the block's four towers
    ops = {n.op_id: OpPlacement("gpu") for n in mg.nodes}
    for t in towers_on_cpu:
        for n in groups[0][t]:
            ops[n.op_id] = OpPlacement("cpu")
    return Plan(ops=ops)


def test_a_cpu_tower_is_computed_after_the_gpu_towers_are_issued():
    mod = towers(np.random.default_rng(0))
    pair = codl_tvm.DevicePair.preset("x86-cuda", arch="sm_90")
    calls = _calls(codl_tvm.compile(mod, pair, _on_cpu(mod, (1,))).mod)
    kernels = [n for n in calls if n.startswith(("conv2d", "max_pool2d"))]
    cpu = [i for i, n in enumerate(kernels) if n.endswith("_d1")]
    gpu = [i for i, n in enumerate(kernels) if n.endswith("_d0")]
    assert len(cpu) == 2 and len(gpu) == 4, kernels
    assert max(gpu) < min(cpu), kernels
    # issue_gpu_first=False (to compare) keeps the model's order: the CPU's tower is second
    calls = _calls(codl_tvm.compile(mod, pair, _on_cpu(mod, (1,)), issue_gpu_first=False).mod)
    kernels = [n for n in calls if n.startswith(("conv2d", "max_pool2d"))]
    assert [n.endswith("_d1") for n in kernels] == [False, True, True, False, False, False]


@settings(max_examples=12, deadline=None)
@given(st.sets(st.integers(0, 3), max_size=4), st.integers(0, 2**16))
def test_towers_on_both_processors_give_the_unsplit_answer(on_cpu, seed):
    rng = np.random.default_rng(seed)
    mod = towers(rng)
    x = {"x": rng.standard_normal((1, 6, 9, 9)).astype("float32")}
    exe = codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"),
                           _on_cpu(mod, tuple(on_cpu)))
    assert rel_err(exe.run(x)[0], reference(mod, x)[0]) <= 1e-5


def test_by_default_it_runs_where_the_plan_puts_whole_ops_on_the_cpu():
    """Where all the CPU's work is inside split ops (each already ordered so), hoisting
    another branch's kernels only delays a split's GPU part: the model's order stays."""
    mod = towers(np.random.default_rng(0))
    pair = codl_tvm.DevicePair.preset("x86-cuda", arch="sm_90")
    towered = _on_cpu(mod, (1,))
    split = Plan.uniform(mod, "OC", 0.5)
    assert towered.runs_whole_ops_on_both() and not split.runs_whole_ops_on_both()
    assert not Plan.single(mod, "cpu").runs_whole_ops_on_both()
    assert codl_tvm.compile(mod, pair, towered).manifest["issue_gpu_first"] is True
    assert codl_tvm.compile(mod, pair, split).manifest["issue_gpu_first"] is False
    assert codl_tvm.compile(mod, pair, split, issue_gpu_first=True).manifest[
        "issue_gpu_first"] is True
