"""The hand-tiled GPU conv2d (gpu_conv.py): numerics on llvm, compile-only cuda/opencl.

No GPU here, so the numerics are checked twice on the CPU: the te compute unscheduled, and
the full GPU schedule with its thread loops left serial (TIR's meaning does not depend on the
binding), both against the unscheduled legalized PrimFunc.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
import subprocess

import hypothesis.strategies as st
import pytest
import tvm
from hypothesis import HealthCheck, given, settings

from codl_tvm import tiling
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import gpu_conv as G
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.analysis import analyze
from codl_tvm.schedules.rebuild import rebuild
from codl_tvm.schedules.target_info import target_info

TOL = 1e-5
HOST = {"kind": "llvm"}
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host=HOST)
OPENCL = tvm.target.Target({"kind": "opencl"}, host=HOST)
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _plan(func, variant: str = "tiled", split: int | None = None) -> G.Plan:
    plan = G.make_tiling(analyze(func).conv, target_info(CUDA), "sm_90", variant)
    if split is None:
        return plan
    k_split = math.ceil(plan.k / (split * plan.tile.bk)) * plan.tile.bk
    return dataclasses.replace(plan, split=math.ceil(plan.k / k_split), k_split=k_split)


def _errors(func, plan: G.Plan) -> tuple[float, float]:
    """(unscheduled te compute, serial GPU schedule) relative errors against ``func``."""
    info = analyze(func)
    args = T.random_args(func)
    want = T.run(T.build(func, HOST), func, args)
    plain = rebuild(func, info.main_block, G.conv_compute(plan), 2)
    serial = G.scheduled(func, info, plan, threads=False)
    return tuple(T.rel_error(T.run(T.build(f, HOST), f, args), want) for f in (plain, serial))


@st.composite
def conv_cases(draw):
    ic = draw(st.integers(1, 9))
    kh, kw = draw(st.sampled_from([1, 3, 5, 7])), draw(st.sampled_from([1, 3]))
    sh, sw = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h = draw(st.integers(max(1, kh - pads[0] - pads[2]), 9))
    w = draw(st.integers(max(1, kw - pads[1] - pads[3]), 12))
    return dict(x=(draw(st.integers(1, 2)), ic, h, w), w=(draw(st.integers(1, 70)), ic, kh, kw),
                strides=(sh, sw), padding=pads, variant=draw(st.sampled_from(sorted(G.VARIANTS))),
                split=draw(st.sampled_from([None, 2, 3])))


@SETTINGS
@given(case=conv_cases())
def test_tiled_conv_numerics(case):
    variant, split = case.pop("variant"), case.pop("split")
    func = T.conv2d_func(case.pop("x"), case.pop("w"), **case)
    assert max(_errors(func, _plan(func, variant, split))) <= TOL


@pytest.mark.parametrize(
    "x, w, attrs, split",
    [
        ((1, 5, 1, 7), (19, 5, 3, 3), dict(padding=1), None),  # one output row
        ((1, 6, 2, 11), (33, 6, 3, 3), dict(padding=(1, 1, 0, 1)), None),  # H-split part
        ((1, 64, 5, 13), (70, 64, 1, 1), {}, 4),  # 1x1, OC not a tile multiple, split-K
        ((1, 4, 9, 11), (3, 4, 7, 7), dict(padding=3), None),  # thin OC, 7x7
        ((1, 6, 9, 11), (13, 6, 3, 3), dict(strides=2, dilation=2, padding=(1, 0, 0, 2)), 2),
    ],
)
def test_tiled_conv_awkward(x, w, attrs, split):
    func = T.conv2d_func(x, w, **attrs)
    assert max(_errors(func, _plan(func, split=split))) <= TOL


@pytest.mark.parametrize(
    "x, w, attrs, split",
    [
        ((1, 16, 13, 13), (113, 16, 1, 1), {}, None),  # 169 pixels: no dimension a tile multiple
        ((1, 16, 13, 13), (461, 16, 1, 1), {}, 3),
        ((1, 16, 13, 13), (125, 16, 3, 3), dict(padding=1), 2),
        ((1, 5, 12, 12), (1083, 5, 6, 6), dict(padding=3), None),  # K = 180
        ((1, 8, 47, 47), (113, 8, 3, 3), dict(strides=2), None),  # 23 x 23 pixels
    ],
)
def test_tiled_conv_partial_tiles(x, w, attrs, split):
    """OC and pixel counts off the tile: the GEMM runs over whole tiles of zero-padded
    operands, and only the valid part reaches the output."""
    func = T.conv2d_func(x, w, **attrs)
    plan = _plan(func, split=split)
    assert plan.m % plan.tile.bm and plan.n % plan.tile.bn
    assert max(_errors(func, plan)) <= TOL


def fma_section(source: str) -> str:
    """The part of the GEMM kernel's K loop (``rk_0``) between barriers that holds the
    register-tile loads and the unrolled FMAs (after the shared-memory staging; with
    ``gpu_prefetch``, between the next step's global loads and its stores to shared memory)."""
    start = source.index("for (int rk_0")
    depth = 0
    for end in range(source.index("{", start), len(source)):
        depth += {"{": 1, "}": -1}.get(source[end], 0)
        if depth == 0:
            break
    parts = source[start:end].split("__syncthreads();")
    return max(parts, key=lambda part: part.count("codl_conv_local_ptr["))


@pytest.mark.parametrize(
    "x, w, attrs",
    [
        ((1, 1024, 13, 13), (113, 1024, 1, 1), {}),  # split-K
        ((1, 5, 12, 12), (1083, 5, 6, 6), dict(padding=3)),
    ],
)
def test_fma_loop_has_no_bounds_check(x, w, attrs):
    """A bounds check on the register tile became per-FMA branches and predicates in nvcc's
    output (K-loop SASS 748-874 instructions instead of 324-453); partial tiles are handled
    by zero-padded operands, so the FMA part of the K loop has no condition at all."""
    func = T.schedule(T.with_target(T.conv2d_func(x, w, **attrs), CUDA), CUDA)
    assert blocking_of(func).rule == "gpu-conv2d-tiled"
    fma = fma_section(T.build(func, CUDA).mod.imports[0].inspect_source())
    tile = _plan(T.conv2d_func(x, w, **attrs)).tile
    assert fma.count("codl_conv_local_ptr[") >= 2 * tile.tm * tile.tn  # the FMAs are there
    assert "if (" not in fma and "?" not in fma


def test_fused_bias_relu_split_k():
    func = T.conv2d_func((1, 8, 3, 5), (21, 8, 5, 5), bias_relu=True, padding=(2, 2, 1, 2))
    assert max(_errors(func, _plan(func, split=3))) <= TOL


def test_plan_split_k_only_when_grid_is_short():
    yolo = G.make_tiling(analyze(T.conv2d_func((1, 1024, 13, 13), (1024, 1024, 3, 3),
                                             padding=1)).conv, target_info(CUDA), "sm_90")
    assert yolo.shape_class == "deep-k" and yolo.split > 1
    assert yolo.split * yolo.m_tiles * yolo.n_tiles >= G.MIN_WAVES * G.SMS["sm_90"]
    assert yolo.split * yolo.k_split >= yolo.k > (yolo.split - 1) * yolo.k_split
    big = G.make_tiling(analyze(T.conv2d_func((1, 64, 128, 128), (256, 64, 3, 3),
                                            padding=1)).conv, target_info(CUDA), "sm_90")
    assert big.split == 1 and big.shape_class == "wide-oc"


def test_rgb_output_conv_goes_to_one_output_per_thread():
    """OC <= 4 lost to DLight's one-output-per-thread kernel on the H100 (KERNELS.md)."""
    func = T.with_target(T.conv2d_func((1, 32, 20, 24), (3, 32, 9, 9), padding=4), CUDA)
    assert blocking_of(T.schedule(func, CUDA)).rule == "gpu-conv2d-thin-oc"


def test_variant_selection():
    func = T.with_target(T.conv2d_func((1, 5, 4, 7), (19, 5, 3, 3), padding=1), CUDA)
    with G.use_variant("dlight"):
        assert blocking_of(T.schedule(func, CUDA)).rule == "gpu-conv2d-implicit-gemm"
    with G.use_variant("tiled-128"):
        assert blocking_of(T.schedule(func, CUDA)).rule == "gpu-conv2d-tiled"
    with pytest.raises(ValueError, match="unknown GPU conv variant"):
        with G.use_variant("nope"):
            pass


CASES = {
    "one-row": (lambda: T.conv2d_func((1, 5, 1, 7), (19, 5, 3, 3), padding=1), None),
    "fused-asym": (lambda: T.conv2d_func((1, 5, 4, 7), (19, 5, 3, 3), bias_relu=True,
                                         padding=(1, 1, 0, 1)), None),
    "stride2-k5": (lambda: T.conv2d_func((1, 8, 11, 9), (40, 8, 5, 5), strides=2,
                                         padding=2), None),
    "yolo-13x13-split-k": (lambda: T.conv2d_func((1, 512, 13, 13), (256, 512, 3, 3),
                                                 bias_relu=True, padding=1), "split"),
    "narrow-oc-9x9-split-k": (lambda: T.conv2d_func((1, 32, 20, 24), (8, 32, 9, 9), padding=4),
                              "split"),
}


@pytest.mark.parametrize("target", [CUDA, OPENCL], ids=["cuda", "opencl"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiles_with_shared_memory_and_grid(case, target):
    make, expect = CASES[case]
    with tiling.use_variants(gpu_winograd=False):  # the yolo case is 3x3 s1 with IC >= 32
        func = T.schedule(make(), target)
    blocking = blocking_of(func)
    assert blocking.rule == "gpu-conv2d-tiled"
    split_k = blocking.grid["blockIdx.z"] > 1
    assert blocking.algorithm.endswith("split-k") == split_k
    if target.kind.name == "cuda":  # the phone GPU has 4 compute units: fewer splits needed
        assert split_k == (expect == "split")
    grids = G.kernel_grids(func)
    main = {k: v for k, v in blocking.grid.items() if not k.startswith("sum.")}
    assert grids[0] == main
    assert blocking.num_blocks == math.prod(v for k, v in main.items() if "blockIdx" in k)
    assert blocking.threads_per_block == main["threadIdx.x"] * main["threadIdx.y"]
    assert blocking.num_blocks * blocking.block_size >= blocking.output_size * main["blockIdx.z"]
    if split_k:
        assert grids[1] == {"blockIdx.x": blocking.grid["sum.blockIdx.x"],
                            "threadIdx.x": blocking.grid["sum.threadIdx.x"]}
    source = T.build(func, target).mod.imports[0].inspect_source()
    if target.kind.name == "cuda":
        assert "__shared__" in source
        bounds = [int(b) for b in re.findall(r"__launch_bounds__\((\d+)\)", source)]
        assert blocking.threads_per_block in bounds
    else:
        assert "__local float" in source


NVCC = shutil.which("nvcc")
TILE_CASES = {  # tile -> a conv the default table gives it (3x3 s1 IC >= 32 would be Winograd)
    "NARROW_OC": ((1, 16, 30, 30), (32, 16, 3, 3), dict(padding=1)),
    "BIG": ((1, 2048, 7, 7), (128, 2048, 1, 1), {}),
    "MID": ((1, 64, 28, 28), (256, 64, 1, 1), {}),
    "TINY_N": ((1, 64, 16, 16), (64, 64, 1, 1), {}),
}


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("case", sorted(TILE_CASES))
def test_every_tile_compiles_with_nvcc(case, tmp_path):
    """Regression: TVM's CUDA build here only generates source; nvcc runs where
    the module is loaded. The bank-conflict padding of the shared weight rows (stride 132 for
    the 128x64 tile) made the 8-float register reads unaligned, and the codegen's gather
    fallback (``make_ulonglong4`` of 8 floats) failed nvcc on the H100 machine only. Every
    tile's kernel goes through nvcc here, and its weight rows are padded to a bank offset."""
    x, w, attrs = TILE_CASES[case]
    func = T.conv2d_func(x, w, **attrs)
    plan = _plan(func)
    assert plan.tile == getattr(tiling, case)
    scheduled = T.schedule(T.with_target(func, CUDA), CUDA)
    source = T.build(scheduled, CUDA).mod.imports[0].inspect_source()
    stride = tiling.wt_row_stride(plan.tile)
    assert stride % tiling.SMEM_BANKS == plan.tile.tm
    assert f"codl_wt_shared_ptr[{plan.tile.bk * stride}]" in source
    (tmp_path / "k.cu").write_text(source)
    done = subprocess.run([NVCC, "--fatbin", "-arch=sm_90", "-o", str(tmp_path / "k.fatbin"),
                           str(tmp_path / "k.cu")], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def test_split_k_follows_the_pairs_gpu_sms():
    """The SM count is the pair's (detected where the GPU is), not a constant of one GPU: on
    8 SMs (an edge-class GPU, or MPS) the deep 13x13 conv fills two waves without split-K."""
    conv = analyze(T.conv2d_func((1, 1024, 13, 13), (1024, 1024, 3, 3), padding=1)).conv
    full = G.make_tiling(conv, target_info(CUDA), "sm_90")
    with tiling.use_gpu_sms(8):
        edge = G.make_tiling(conv, target_info(CUDA), "sm_90")
    assert full.split > 1 and edge.split == 1
    assert tiling.sm_count("sm_90", "cuda") == G.SMS["sm_90"]  # the context has ended
    with pytest.raises(ValueError, match="at least one SM"), tiling.use_gpu_sms(0):
        pass
