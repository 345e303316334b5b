"""The tiled GPU matmul (gpu_matmul.py): numerics on llvm, the dispatch's choice, cuda code.

No GPU here: the schedule's numerics are checked with its thread loops left serial (TIR's
meaning does not depend on the binding) against the unscheduled legalized PrimFunc, on dense
layers with batch axes in front, fused epilogues, split-K and attention's batched matmuls.
"""

from __future__ import annotations

import dataclasses
import math

import hypothesis.strategies as st
import pytest
import tvm
from hypothesis import HealthCheck, given, settings
from tvm.relax import op as rop

from codl_tvm import tiling
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import gpu_conv as G
from codl_tvm.schedules import gpu_matmul as GM
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.analysis import analyze
from codl_tvm.schedules.target_info import target_info

TOL = 1e-5
HOST = {"kind": "llvm"}
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host=HOST)
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _batched(a: tuple[int, ...], b: tuple[int, ...]):
    return T.op_func([("a", a), ("b", b)], lambda bb, x, w: rop.matmul(x, w))


def _serial_error(func, variant: str = "tiled", split: int | None = None) -> float:
    plan = GM.make_tiling(func, target_info(CUDA), "sm_90", variant)
    if split is not None and not plan.batch:
        k_split = math.ceil(plan.k / (split * plan.tile.bk)) * plan.tile.bk
        plan = dataclasses.replace(plan, split=math.ceil(plan.k / k_split), k_split=k_split)
    args = T.random_args(func)
    want = T.run(T.build(func, HOST), func, args)
    serial = GM.scheduled(func, analyze(func), plan, threads=False)
    return T.rel_error(T.run(T.build(serial, HOST), serial, args), want)


@SETTINGS
@given(m=st.integers(5, 70), k=st.integers(1, 90), n=st.integers(1, 140),
       lead=st.integers(0, 1), fused=st.booleans(),
       variant=st.sampled_from(sorted(tiling.VARIANTS)), split=st.sampled_from([None, 2, 3]))
def test_tiled_matmul_numerics(m, k, n, lead, fused, variant, split):
    func = T.matmul_func(m, k, n, bias_relu=fused, lead=lead)
    assert _serial_error(func, variant, split) <= TOL


@SETTINGS
@given(batch=st.sampled_from([(1,), (3,), (2, 3), (1, 5)]), m=st.integers(1, 40),
       k=st.integers(1, 70), n=st.integers(1, 70))
def test_batched_matmul_numerics(batch, m, k, n):
    assert _serial_error(_batched((*batch, m, k), (*batch, k, n))) <= TOL


@pytest.mark.parametrize("split", [None, 2])
def test_a_bias_and_gelu_epilogue_is_fused_into_the_write_back(split):
    # BERT's intermediate layers: GELU (the erf form exporters write) reads the value twice
    func = T.matmul_gelu_func((1, 9, 24), 40)
    assert _serial_error(func, split=split) <= TOL


def test_the_dispatch_picks_the_tiled_kernel_above_a_gemvs_rows():
    assert blocking_of(T.schedule(T.matmul_func(1, 64, 37), CUDA)).rule == "gpu-gemv"
    tiled = blocking_of(T.schedule(T.matmul_func(128, 3072, 768, lead=1), CUDA))
    assert tiled.rule == "gpu-matmul-tiled" and tiled.algorithm == "gpu-matmul-tiled-split-k"
    heads = blocking_of(T.schedule(_batched((1, 12, 128, 64), (1, 12, 64, 128)), CUDA))
    assert heads.algorithm == "gpu-matmul-tiled" and heads.grid["blockIdx.z"] == 12
    with tiling.use_variants(gpu_matmul="dlight"):  # the old kernel stays reachable
        old = blocking_of(T.schedule(T.matmul_func(128, 768, 768, lead=1), CUDA))
    assert old.rule == "gpu-matmul"


@pytest.mark.parametrize("func", [
    lambda: T.matmul_func(197, 3072, 768, lead=1, bias_relu=True),  # split-K: two kernels
    lambda: _batched((1, 12, 197, 64), (1, 12, 64, 197)),
])
def test_cuda_code_has_the_planned_grids(func):
    f = T.schedule(func(), CUDA)
    blocking = blocking_of(f)
    main = {k: v for k, v in blocking.grid.items() if not k.startswith("sum.")}
    tail = {k.removeprefix("sum."): v for k, v in blocking.grid.items() if k.startswith("sum.")}
    assert G.kernel_grids(f) == [main, *([tail] if tail else [])]
    source = T.build(f, CUDA).mod.imports[0].inspect_source()
    assert f"__launch_bounds__({blocking.threads_per_block})" in source


@pytest.mark.parametrize("prefetch", [True, False])
def test_prefetch_stages_the_next_k_step_through_registers(prefetch):
    """KernelVariants.gpu_prefetch (on by default): the next K step's tiles are loaded into
    registers before the FMA loop and stored to shared memory after it; the numbers do not
    change."""
    func = T.matmul_func(40, 300, 70, lead=1, bias_relu=True)
    with tiling.use_variants(gpu_prefetch=prefetch):
        assert _serial_error(func) <= TOL
        source = T.build(T.schedule(func, CUDA), CUDA).mod.imports[0].inspect_source()
    k_loop = source[source.index("for (int rk_0"):]
    before_sync = k_loop[:k_loop.index("__syncthreads()")]
    # with prefetch the K loop opens with the next step's global loads into registers; without,
    # with a barrier and then the loads straight into shared memory
    assert ("a_ptr[" in before_sync and "shared_ptr[" not in before_sync) == prefetch
