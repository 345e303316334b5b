"""The CPU profile of an anchors model (benchmarks/anchors_cpu_profile.py): every VM call of a
run is counted once per run, with its arguments' shapes, on a real compiled module."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import tvm
from tvm import relax

from tests.helpers import LLVM, conv, load_benchmark, single_function


def test_vm_calls_count_each_kernel_once_per_run_with_its_shapes():
    profile = load_benchmark("anchors_cpu_profile")
    rng = np.random.default_rng(0)

    def body(bb, x):
        y = bb.emit(relax.op.nn.relu(conv(bb, x, rng, 8, 3, padding=(1, 1, 1, 1))))
        return bb.emit(relax.op.add(y, y))

    mod = single_function((1, 4, 6, 6), body)
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target(LLVM)), tvm.cpu())
    x = tvm.runtime.tensor(rng.standard_normal((1, 4, 6, 6)).astype("float32"))
    calls = profile.vm_calls(SimpleNamespace(vm=vm), lambda: vm["main"](x))
    kernels = {n: c for n, c in calls.items() if not n.startswith("vm.builtin")}
    assert kernels, calls
    assert all(c["calls"] >= 1 and c["us"] > 0 for c in kernels.values())
    conv_call = next(c for n, c in kernels.items() if "conv2d" in n)
    assert conv_call["shapes"][0] == [1, 4, 6, 6]
    assert conv_call["shapes"][-1] == [1, 8, 6, 6]
