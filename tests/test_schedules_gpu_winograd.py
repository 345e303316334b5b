"""GPU Winograd F(2x2,3x3) (gpu_winograd.py): numerics on llvm, compile-only cuda/opencl.

As for the tiled conv, the numerics are checked on the CPU twice: the te compute unscheduled,
and the full GPU schedule with its thread loops left serial, both against the unscheduled
legalized PrimFunc.
"""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
import tvm
from hypothesis import HealthCheck, given, settings
from test_schedules_gpu_conv import fma_section

from codl_tvm import tiling
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import gpu_winograd as W
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.analysis import analyze
from codl_tvm.schedules.gpu_conv import kernel_grids
from codl_tvm.schedules.rebuild import rebuild
from codl_tvm.schedules.target_info import target_info

TOL = 1e-5
HOST = {"kind": "llvm"}
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host=HOST)
OPENCL = tvm.target.Target({"kind": "opencl"}, host=HOST)
SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _errors(func) -> tuple[float, float]:
    """(unscheduled te compute, serial GPU schedule) relative errors against ``func``."""
    info = analyze(func)
    plan = W.make_tiling(info.conv, target_info(CUDA))
    args = T.random_args(func)
    want = T.run(T.build(func, HOST), func, args)
    plain = rebuild(func, info.main_block, W.winograd_compute(plan), 2)
    serial = W.scheduled(func, info, plan, threads=False)
    return tuple(T.rel_error(T.run(T.build(f, HOST), f, args), want) for f in (plain, serial))


@st.composite
def conv_cases(draw):
    ic = draw(st.integers(1, 20))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, 3 - pads[0] - pads[2]), 9))
    w = draw(st.integers(max(1, 3 - pads[1] - pads[3]), 12))
    return dict(x=(draw(st.integers(1, 2)), ic, h, w), w=(draw(st.integers(1, 70)), ic, 3, 3),
                padding=pads)


@SETTINGS
@given(case=conv_cases())
def test_winograd_numerics(case):
    func = T.conv2d_func(case.pop("x"), case.pop("w"), **case)
    assert max(_errors(func)) <= TOL


@pytest.mark.parametrize(
    "x, w, attrs",
    [
        ((1, 5, 1, 7), (19, 5, 3, 3), dict(padding=1)),  # one output row: half tiles
        ((1, 6, 3, 11), (33, 6, 3, 3), dict(padding=(1, 1, 0, 1))),  # H-split part, asym pad
        ((1, 7, 5, 5), (3, 7, 3, 3), {}),  # no padding, OH = OW = 3 (odd), thin OC
        ((1, 150, 4, 6), (70, 150, 3, 3), dict(padding=(0, 1, 2, 1))),  # IC, OC not tiles
        ((1, 8, 26, 26), (113, 8, 3, 3), dict(padding=1)),  # 169 tiles, OC 113: partial tiles
        ((1, 4, 13, 13), (461, 4, 3, 3), dict(padding=1)),  # 49 tiles
    ],
)
def test_winograd_awkward(x, w, attrs):
    assert max(_errors(T.conv2d_func(x, w, **attrs))) <= TOL


def test_fused_bias_relu():
    func = T.conv2d_func((1, 9, 5, 7), (21, 9, 3, 3), bias_relu=True, padding=(2, 1, 1, 0))
    assert max(_errors(func)) <= TOL


@pytest.fixture(autouse=True)
def small_channels_allowed(monkeypatch):
    """The test shapes are small; the measured IC threshold has its own test."""
    monkeypatch.setattr(W, "MIN_IC", 1)


def test_dispatch_declines_few_input_channels(monkeypatch):
    monkeypatch.setattr(W, "MIN_IC", 32)  # on by default
    rgb = T.with_target(T.conv2d_func((1, 3, 6, 6), (32, 3, 3, 3), padding=1), CUDA)
    assert blocking_of(T.schedule(rgb, CUDA)).rule == "gpu-conv2d-tiled"
    deep = T.with_target(T.conv2d_func((1, 32, 6, 6), (32, 32, 3, 3), padding=1), CUDA)
    assert blocking_of(T.schedule(deep, CUDA)).rule == "gpu-conv2d-winograd"


def test_dispatch_on_by_default_off_by_variant(monkeypatch):
    func = T.with_target(T.conv2d_func((1, 16, 6, 6), (32, 16, 3, 3), padding=1), CUDA)
    assert W.enabled()
    assert blocking_of(T.schedule(func, CUDA)).rule == "gpu-conv2d-winograd"
    with tiling.use_variants(tiling.KernelVariants(gpu_winograd=False)):
        assert not W.enabled()
        assert blocking_of(T.schedule(func, CUDA)).rule == "gpu-conv2d-tiled"
        with W.enable():
            assert blocking_of(T.schedule(func, CUDA)).rule == "gpu-conv2d-winograd"
    # the retired environment switch changes nothing
    monkeypatch.setenv("CODL_GPU_WINOGRAD", "0")
    assert W.enabled()
    assert blocking_of(T.schedule(func, CUDA)).rule == "gpu-conv2d-winograd"
    stride2 = T.with_target(T.conv2d_func((1, 16, 6, 6), (32, 16, 3, 3), strides=2), CUDA)
    assert blocking_of(T.schedule(stride2, CUDA)).rule == "gpu-conv2d-tiled"
    one_by_one = T.with_target(T.conv2d_func((1, 16, 6, 6), (32, 16, 1, 1)), CUDA)
    assert blocking_of(T.schedule(one_by_one, CUDA)).rule != "gpu-conv2d-winograd"


CASES = {
    "one-row-fused": lambda: T.conv2d_func((1, 5, 2, 7), (19, 5, 3, 3), bias_relu=True,
                                           padding=(1, 1, 0, 1)),
    "odd-asym": lambda: T.conv2d_func((1, 64, 7, 13), (70, 64, 3, 3), padding=(0, 1, 1, 1)),
    "yolo-13x13": lambda: T.conv2d_func((1, 256, 13, 13), (512, 256, 3, 3), bias_relu=True,
                                        padding=1),
}


@pytest.mark.parametrize("target", [CUDA, OPENCL], ids=["cuda", "opencl"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiles_with_shared_memory_and_grid(case, target):
    func = T.schedule(CASES[case](), target)
    blocking = blocking_of(func)
    assert (blocking.rule, blocking.algorithm) == ("gpu-conv2d-winograd", W.ALGORITHM)
    grid = blocking.grid
    sub = {key: {k.split(".", 1)[1]: v for k, v in grid.items() if k.startswith(f"{key}.")}
           for key in ("u", "v", "y")}
    gemm = {k: v for k, v in grid.items() if k.startswith(("blockIdx", "threadIdx"))}
    # program order: weight transform, input transform, batched GEMM, output transform
    assert kernel_grids(func) == [sub["u"], sub["v"], gemm, sub["y"]]
    assert gemm["blockIdx.z"] == 16
    assert blocking.num_blocks == math.prod(v for k, v in gemm.items() if "blockIdx" in k)
    assert blocking.threads_per_block == gemm["threadIdx.x"] * gemm["threadIdx.y"]
    assert blocking.num_blocks * blocking.block_size >= blocking.output_size
    c = analyze(CASES[case]()).conv
    tiles = c.n * math.ceil(c.oh / 2) * math.ceil(c.ow / 2)
    assert blocking.output_size == 16 * c.oc * tiles
    assert sub["y"]["blockIdx.x"] * sub["y"]["threadIdx.x"] >= c.oc * tiles
    source = T.build(func, target).mod.imports[0].inspect_source()
    if target.kind.name == "cuda":
        assert "__shared__" in source
        assert source.count("__global__ void") == 2 * 4  # declarations + definitions
    else:
        assert "__local float" in source


def test_fma_loop_has_no_bounds_check():
    """The batched GEMM runs over whole tiles (zero-padded U and V), so OC 113 and 169 tiles
    put no condition in the FMA part of its K loop (see the tiled conv's test)."""
    conv = T.conv2d_func((1, 64, 26, 26), (113, 64, 3, 3), padding=1)
    plan = W.make_tiling(analyze(conv).conv, target_info(CUDA))
    assert plan.m % plan.tile.bm and plan.n % plan.tile.bn
    func = T.schedule(T.with_target(conv, CUDA), CUDA)
    assert blocking_of(func).rule == "gpu-conv2d-winograd"
    fma = fma_section(T.build(func, CUDA).mod.imports[0].inspect_source())
    assert fma.count("codl_conv_local_ptr[") >= 2 * plan.tile.tm * plan.tile.tn
    assert "if (" not in fma and "?" not in fma
