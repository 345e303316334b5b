"""Compile-only GPU checks (cuda sm_90, opencl): every kernel gets threads and a blocking
record whose grid matches the launch extents of the built code."""

from __future__ import annotations

import math
import re

import pytest
import tvm
from tvm.relax import op as rop

from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.gpu_rules import launch_extents

HOST = {"kind": "llvm"}
TARGETS = {
    "cuda": tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host=HOST),
    "opencl": tvm.target.Target({"kind": "opencl"}, host=HOST),
}
CASES = {
    "conv-one-row": (lambda: T.conv2d_func((1, 5, 1, 7), (19, 5, 3, 3), padding=1),
                     "gpu-conv2d-tiled"),
    "conv-stride2-dil2-asym": (
        lambda: T.conv2d_func((1, 6, 9, 11), (13, 6, 3, 3), strides=2, dilation=2,
                              padding=(1, 0, 0, 2)), "gpu-conv2d-tiled"),
    "conv-fused": (lambda: T.conv2d_func((1, 5, 4, 7), (19, 5, 3, 3), bias_relu=True,
                                         padding=(1, 1, 0, 1)), "gpu-conv2d-tiled"),
    "depthwise": (lambda: T.conv2d_func((1, 8, 9, 9), (8, 1, 3, 3), groups=8, strides=2,
                                        padding=1), "gpu-grouped-conv2d"),
    "avg-pool": (lambda: T.pool2d_func((1, 8, 9, 9), "avg", pool_size=(3, 3),
                                       padding=(1, 0, 0, 1)), "gpu-pool2d"),
    "global-avg-pool": (lambda: T.pool2d_func((1, 8, 9, 9), "avg", pool_size=(9, 9)),
                        "gpu-global-pool2d"),
    # regression: DLight's Reduction takes sums only, and a global max pool fell
    # to Fallback's one thread per channel; now one block per channel reduces across threads
    "global-max-pool": (lambda: T.pool2d_func((1, 8, 24, 24), "max", pool_size=(24, 24)),
                        "gpu-global-pool2d"),
    "instance-norm-mean": (lambda: T.op_func([("x", (1, 6, 40, 30))], lambda bb, x: rop.mean(
        x, axis=[2, 3], keepdims=True)), "gpu-global-pool2d"),
    "gemv": (lambda: T.matmul_func(1, 64, 37), "gpu-gemv"),
    "gemm": (lambda: T.matmul_func(30, 64, 100), "gpu-matmul-tiled"),
    "batched-matmul": (lambda: T.op_func([("a", (2, 3, 9, 24)), ("b", (2, 3, 24, 32))],
                                         lambda bb, a, b: rop.matmul(a, b)), "gpu-matmul-tiled"),
}


@pytest.mark.parametrize("kind", sorted(TARGETS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_compiles_with_blocking(kind, case):
    make, rule = CASES[case]
    target = TARGETS[kind]
    func = T.schedule(make(), target)
    blocking = blocking_of(func)
    assert blocking is not None and blocking.processor == "gpu" and blocking.rule == rule
    grid = launch_extents(func)
    assert blocking.grid == grid
    assert blocking.num_blocks == math.prod(v for k, v in grid.items() if "blockIdx" in k)
    assert blocking.num_blocks * blocking.block_size >= blocking.output_size
    lib = T.build(func, target)  # fails VerifyMemory if a loop were left unbound
    if kind == "cuda":
        source = lib.mod.imports[0].inspect_source()
        bounds = [int(b) for b in re.findall(r"__launch_bounds__\((\d+)\)", source)]
        assert blocking.threads_per_block in bounds


@pytest.mark.parametrize(("kind", "hw", "threads"), [("max", 7, 64), ("max", 24, 256)])
def test_a_global_max_pool_reduces_across_threads(kind, hw, threads):
    """One block per channel, the window over a power of two of threads (at most
    256); the same ``global-reduction`` label as DLight's Reduction of a global average."""
    func = T.schedule(T.pool2d_func((1, 264, hw, hw), kind, pool_size=(hw, hw)), TARGETS["cuda"])
    blocking = blocking_of(func)
    assert blocking.algorithm == "global-reduction"
    assert launch_extents(func) == {"blockIdx.x": 264, "threadIdx.x": threads}
