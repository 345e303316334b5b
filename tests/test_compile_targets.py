"""Compile-only builds for real GPU targets: every kernel carries its device's target, and the
VM code issues each GPU sub-op before the CPU sub-op it overlaps with."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tvm
from helpers import conv, single_function
from tvm import relax, tirx
from tvm.relax import op as rop

import codl_tvm
from codl_tvm import Chain, OpPlacement, Plan
from codl_tvm.passes.stage_cross_device_copies import COPY


def _model() -> tvm.IRModule:
    rng = np.random.default_rng(0)

    def body(bb, x):
        x = conv(bb, x, rng, 8, 3, padding=(1, 1, 1, 1), bias=True)
        x = conv(bb, x, rng, 8, 3, padding=(1, 1, 1, 1), groups=8)
        x = bb.emit(rop.nn.max_pool2d(x, (2, 2), (2, 2)))
        x = bb.emit(rop.reshape(x, (1, 8 * 8 * 8)))
        return bb.emit(rop.matmul(x, relax.const(rng.standard_normal((512, 10)).astype("float32"))))

    return codl_tvm.load_model(single_function((1, 3, 16, 16), body))


PAIRS = {
    "x86-cuda": lambda: codl_tvm.DevicePair.preset("x86-cuda", arch="sm_90"),
    "android-opencl": lambda: codl_tvm.DevicePair.preset("android-opencl"),
}


def _plan(mod):
    plan = Plan.uniform(mod, "H", 0.6)
    plan.ops["matmul_0"] = OpPlacement("split", "OC", 0.5)
    plan.chains = [Chain(["conv2d_1", "max_pool2d_0"], "H", 0.6)]
    return plan


def _calls(mod: tvm.IRModule) -> list[str]:
    """Names of the PrimFuncs / builtins main calls, in VM order (``fused_`` dropped)."""
    names: list[str] = []

    def visit(node):
        if isinstance(node, relax.Call):
            op = node.op
            if isinstance(op, tvm.ir.GlobalVar):  # fused kernels: named from their ops
                names.append(op.name_hint.removeprefix("fused_"))
            elif isinstance(op, relax.ExternFunc):
                names.append(op.global_symbol)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return names


@pytest.mark.parametrize("pair_name", sorted(PAIRS))
def test_gpu_pair_builds_and_binds_each_kernel_to_its_target(pair_name):
    pair = PAIRS[pair_name]()
    mod = _model()
    exe = codl_tvm.compile(mod, pair, _plan(mod))
    kinds = {}
    for gv, func in exe.mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            kinds[gv.name_hint] = func.attrs["target"].kind.name
    gpu_kind = pair.gpu_spec["kind"]
    assert {k for k in kinds.values()} == {"llvm", gpu_kind}
    # per-device copies: _d0 kernels are the GPU's, _d1 the CPU's
    for name, kind in kinds.items():
        assert kind == (gpu_kind if name.endswith("_d0") else "llvm"), name
    assert any(n.startswith("conv2d") and n.endswith("_d1") for n in kinds)
    # weights are parameters on the device that reads them, not VM constants (all on devices[0])
    assert {p["role"] for p in exe.manifest["params"]} == {"cpu", "gpu"}


def test_gpu_sub_op_is_issued_before_its_cpu_sub_op_and_after_all_copies():
    pair = PAIRS["x86-cuda"]()
    mod = _model()
    exe = codl_tvm.compile(mod, pair, _plan(mod))
    calls = _calls(exe.mod)
    anchors = [i for i, n in enumerate(calls) if n.startswith(("conv2d", "max_pool2d", "matmul"))]
    assert anchors
    # walk the split units: between two concats there is one GPU part and one CPU part
    unit_start = 0
    for i, name in enumerate(calls):
        if not name.startswith("concatenate"):
            continue
        unit = calls[unit_start:i]
        gpu = [j for j, n in enumerate(unit) if n.startswith(("conv2d", "max_pool", "matmul"))
               and n.endswith("_d0")]
        cpu = [j for j, n in enumerate(unit) if n.startswith(("conv2d", "max_pool", "matmul"))
               and n.endswith("_d1")]
        copies = [j for j, n in enumerate(unit) if n in ("vm.builtin.to_device", COPY)]
        assert gpu and cpu, unit
        assert max(gpu) < min(cpu), unit
        # every copy into the CPU part happens before the GPU launch; one copy comes back
        assert sum(j > min(gpu) for j in copies) == 1, unit
        unit_start = i + 1


def test_no_static_memory_plan_shares_storage_across_devices():
    """Regression (apache/tvm#20207): a storage of one device must never hold another's
    tensor; the pipeline leaves StaticPlanBlockMemory out."""
    pair = codl_tvm.DevicePair.preset("cpu-pair")
    mod = _model()
    exe = codl_tvm.compile(mod, pair, _plan(mod))
    text = exe.mod["main"].script()
    storages: dict[str, str] = {}
    for line in text.splitlines():
        if "R.vm.alloc_storage(" in line:
            name = line.split(":")[0].strip()
            storages[name] = line.split("R.vm.alloc_storage(")[1].split(",")[1].strip()
        if "R.vm.alloc_tensor(" in line:
            args = line.split("R.vm.alloc_tensor(")[1].split(",")
            storage, device = args[0].strip(), args[-1].strip(" )")
            assert storages[storage] == device, line


def test_android_adreno_compiles():
    pair = codl_tvm.DevicePair.preset("android-adreno")
    mod = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exe = codl_tvm.compile(mod, pair, Plan.uniform(mod, "OC", 0.5))
    targets = {str(f.attrs["target"].kind.name) for f in exe.mod.functions.values()
               if isinstance(f, tirx.PrimFunc)}
    assert targets == {"llvm", "opencl"}


def _graph_captures(exe) -> int:
    return sum(1 for gv in exe.mod.functions if "cuda_graph_capture" in gv.name_hint)


def test_cuda_graphs_capture_gpu_only_plans_and_nothing_else():
    mod = _model()
    pair = PAIRS["x86-cuda"]()
    whole = codl_tvm.compile(mod, pair, cuda_graph=True)
    assert whole.manifest["cuda_graph"] and _graph_captures(whole) >= 1
    assert "vm.builtin.cuda_graph.run_or_capture" in whole.mod["main"].script()
    # a split's CPU kernels and copies cannot be captured, nor memory planned across devices
    split = codl_tvm.compile(mod, pair, _plan(mod), cuda_graph=True)
    assert not split.manifest["cuda_graph"] and _graph_captures(split) == 0
    # an OpenCL or CPU "GPU" has no CUDA graphs; off by default
    cpu = codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"), cuda_graph=True)
    assert not cpu.manifest["cuda_graph"] and _graph_captures(cpu) == 0
    assert not codl_tvm.compile(mod, pair).manifest["cuda_graph"]


def test_single_device_plans_are_recognised():
    mod = _model()
    assert Plan.single(mod, "gpu").single_device() == "gpu"
    assert Plan.single(mod, "cpu").single_device() == "cpu"
    assert Plan(num_ops=None).single_device() == "gpu"  # unnamed ops run on the GPU
    assert _plan(mod).single_device() is None
    mixed = Plan.single(mod, "gpu")
    mixed.ops["conv2d_0"] = OpPlacement("cpu")
    assert mixed.single_device() is None
