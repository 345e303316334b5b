"""Every call of a Relax VM run, timed through the VM's instrument
(``codl_tvm.profiler.vm_calls``, which ``benchmarks/anchors_cpu_profile.py`` and
``cpu_kernel_profile.py`` print): each kernel is counted once per run, with its arguments'
shapes, on a real compiled module."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from codl_tvm.profiler.vm_calls import vm_calls
from tests.helpers import LLVM, conv, single_function


def test_each_kernel_is_counted_once_per_run_with_its_shapes():
    rng = np.random.default_rng(0)

    def body(bb, x):
        y = bb.emit(relax.op.nn.relu(conv(bb, x, rng, 8, 3, padding=(1, 1, 1, 1))))
        return bb.emit(relax.op.add(y, y))

    mod = single_function((1, 4, 6, 6), body)
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target(LLVM)), tvm.cpu())
    x = tvm.runtime.tensor(rng.standard_normal((1, 4, 6, 6)).astype("float32"))
    calls = vm_calls(vm, lambda: vm["main"](x), runs=3)
    kernels = {n: c for n, c in calls.items() if not n.startswith("vm.builtin")}
    assert kernels, calls
    assert all(c["calls"] == 1 and c["us"] > 0 for c in kernels.values())
    # the median of 3 runs lies within their range, whose mean is "us"
    assert all(0 < c["median_us"] <= 3 * c["us"] for c in calls.values())
    conv_call = next(c for n, c in kernels.items() if "conv2d" in n)
    assert conv_call["shapes"][0] == [1, 4, 6, 6]
    assert conv_call["shapes"][-1] == [1, 8, 6, 6]
    again = vm_calls(vm, lambda: vm["main"](x), runs=2)  # set anew: counts do not pile up
    assert {n: c["calls"] for n, c in again.items()} == {n: c["calls"] for n, c in calls.items()}
