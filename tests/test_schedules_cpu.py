"""CPU schedules equal the unscheduled legalized PrimFunc on random inputs (rel. err <= 1e-5)."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
import tvm
from hypothesis import HealthCheck, example, given, settings
from tvm.relax import op as rop

from codl_tvm import tiling
from codl_tvm.schedules import blocking_of, dispatch
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.analysis import analyze
from codl_tvm.schedules.target_info import target_info

TOL = 1e-5
# AVX-512 lanes (where this host lacks them, its widest: T.runnable_here) and the SSE widths
TARGETS = [T.AVX512_TARGET, T.CPU_TARGET]
SETTINGS = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def conv_cases(draw, depthwise: bool):
    ic = draw(st.integers(2 if depthwise else 1, 8))
    kh, kw = draw(st.sampled_from([1, 3, 5])), draw(st.sampled_from([1, 3]))
    sh, sw = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    dh, dw = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - pads[0] - pads[2]), 9))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - pads[1] - pads[3]), 12))
    oc = ic if depthwise else draw(st.integers(1, 40))
    groups = ic if depthwise else 1
    return dict(
        x=(1, ic, h, w), w=(oc, ic // groups, kh, kw), strides=(sh, sw), dilation=(dh, dw),
        padding=pads, groups=groups,
    )


def _check(func, rule: str, target: dict) -> None:
    assert T.check_cpu(func, target) <= TOL
    blocking = blocking_of(T.schedule(func, target))
    assert blocking is not None and blocking.rule == rule


@pytest.mark.parametrize("target", TARGETS, ids=["avx512", "sse"])
@SETTINGS
@given(case=conv_cases(depthwise=False))
def test_conv2d_direct(case, target):
    x, w = case.pop("x"), case.pop("w")
    func = T.conv2d_func(x, w, **case)
    rule = dispatch.select_rules(analyze(func), target_info(tvm.target.Target(target)))[0].name
    assert rule in ("cpu-conv2d-direct-nchwc", "cpu-conv2d-gemm-1x1", "cpu-conv2d-winograd")
    _check(func, rule, target)  # 1x1 and 3x3 shapes go to the GEMM / Winograd where they win


@SETTINGS
@given(case=conv_cases(depthwise=True))
def test_depthwise(case):
    x, w = case.pop("x"), case.pop("w")
    _check(T.conv2d_func(x, w, **case), "cpu-grouped-conv2d", TARGETS[0])


@pytest.mark.parametrize(
    "x, w, attrs",
    [
        ((1, 6, 7, 9), (4, 3, 3, 3), dict(groups=2, padding=(1, 0, 0, 1))),  # grouped
        ((1, 4, 5, 5), (8, 1, 3, 3), dict(groups=4, strides=2, padding=1)),  # multiplier 2
        ((1, 3, 1, 11), (33, 3, 3, 3), dict(padding=(1, 1, 1, 0))),  # one output row
        ((1, 3, 2, 11), (17, 3, 3, 3), dict(padding=(1, 1, 0, 1))),  # top pad only
        ((1, 64, 5, 13), (70, 64, 1, 1), {}),  # 1x1, OC not a multiple of the block
    ],
)
def test_conv2d_awkward(x, w, attrs):
    assert T.check_cpu(T.conv2d_func(x, w, **attrs), TARGETS[0]) <= TOL


def test_conv2d_fused_bias_relu():
    func = T.conv2d_func((1, 5, 6, 7), (19, 5, 3, 3), bias_relu=True, padding=(1, 1, 0, 1))
    _check(func, "cpu-conv2d-direct-nchwc", TARGETS[0])


@SETTINGS
@given(
    kind=st.sampled_from(["max", "avg"]), c=st.integers(1, 8), h=st.integers(3, 9),
    w=st.integers(3, 9), k=st.sampled_from([2, 3]), s=st.sampled_from([1, 2]),
    pads=st.tuples(*[st.integers(0, 1)] * 4),
)
# regression: TVM's reference build of this avg pool failed LLVM verification
@example(kind="avg", c=4, h=4, w=3, k=2, s=1, pads=(1, 0, 1, 0))
def test_pool2d(kind, c, h, w, k, s, pads):
    func = T.pool2d_func((1, c, h, w), kind, pool_size=(k, k), strides=(s, s), padding=pads)
    _check(func, "cpu-pool2d", TARGETS[0])
    # the pad stays a block (its rows copied per task) exactly where the shared rule says so
    copied = "pad_temp" in T.schedule(func, TARGETS[0]).script()
    assert copied == tiling.pool_copies_rows(kind == "max", pads[0] + pads[2])


def test_a_max_pool_that_pads_rows_vectorizes_its_window() -> None:
    """Regression: ResNet's 3x3/2 max pool over 112x112 with the pad inlined
    compiled to scalar ``vmaxss`` only on Sapphire Rapids; with each task's rows copied
    first its window loop is vectorized as an unpadded pool's (it ran 0.60x as long on the
    H100 host's CPU)."""
    target = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16}
    func = T.pool2d_func((1, 64, 112, 112), "max", pool_size=(3, 3), strides=(2, 2),
                         padding=(1, 1, 1, 1))
    asm = T.build(T.schedule(func, target), target).mod.inspect_source("s")
    assert "vmaxps" in asm


@SETTINGS
@given(m=st.integers(1, 5), k=st.integers(1, 70), n=st.integers(1, 70), fused=st.booleans())
def test_matmul(m, k, n, fused):
    _check(T.matmul_func(m, k, n, bias_relu=fused), "cpu-matmul", TARGETS[0])


@SETTINGS
@given(m=st.integers(1, 40), k=st.integers(1, 70), n=st.integers(1, 70), lead=st.integers(1, 2),
       fused=st.booleans())
def test_a_dense_layer_on_a_batch_1_sequence_is_a_matmul(m, k, n, lead, fused):
    # regression: [1, M, K] x [K, N] (BERT's and ViT's dense layers) was no matmul to the
    # dispatch and ran as generic parallel loops, 1.7 GFLOP/s for 128x768x768 on 2 cores
    _check(T.matmul_func(m, k, n, bias_relu=fused, lead=lead), "cpu-matmul", TARGETS[0])


@SETTINGS
@given(batch=st.lists(st.integers(1, 4), min_size=1, max_size=2), m=st.integers(1, 20),
       k=st.integers(1, 40), n=st.integers(1, 40))
def test_a_batched_matmul_is_one_matmul_per_batch_index(batch, m, k, n):
    # attention's Q K^T and P V ([1, 12, 128, 64] x [1, 12, 64, 128] in BERT-base) ran as
    # generic parallel loops
    func = T.op_func([("a", (*batch, m, k)), ("b", (*batch, k, n))],
                     lambda bb, a, b: rop.matmul(a, b))
    _check(func, "cpu-matmul", TARGETS[0])
    assert blocking_of(T.schedule(func, TARGETS[0])).output_size == math.prod(batch) * m * n


@pytest.mark.parametrize("target", TARGETS, ids=["avx512", "sse"])
@pytest.mark.parametrize(("a", "b", "fused"), [
    ((20, 48), (48, 64), False),  # 5 row tiles x one 4-vector panel (AVX-512)
    ((1, 23, 40), (40, 96), True),  # rows not a multiple of the tile; 2-vector panels
    ((1, 5, 7, 16), (16, 128), False),  # ConvNeXt's [1, H, W, C] dense
    ((2, 3, 9, 24), (2, 3, 24, 32), False),  # a batched (attention-like) matmul
])  # fmt: skip
def test_packed_matmul_equals_the_streamed_one(a, b, fused, target):
    """The packed kernel (weight panels in the kernel, a register tile over all of K) serves
    matmuls of more than a GEMV's rows; the streamed one stays for GEMVs and for
    ``cpu_matmul=streamed``. Both give the reference's answer."""
    if fused:  # [M, K] or [1, M, K] x [K, N] + bias + ReLU
        func = T.matmul_func(a[-2], a[-1], b[-1], bias_relu=True, lead=len(a) - 2)
    else:
        func = T.op_func([("a", a), ("b", b)], lambda bb, x, w: rop.matmul(x, w))
    _check(func, "cpu-matmul", target)
    assert blocking_of(T.schedule(func, target)).algorithm == "gemm-packed"
    with tiling.use_variants(cpu_matmul="streamed"):
        _check(func, "cpu-matmul", target)
        assert blocking_of(T.schedule(func, target)).algorithm == "gemm"


def test_a_gemv_keeps_the_streamed_kernel():
    assert blocking_of(T.schedule(T.matmul_func(1, 64, 128), TARGETS[0])).algorithm == "gemv"


@pytest.mark.parametrize("lead", [(), (1,), (1, 5)])
def test_a_matmul_with_a_gelu_epilogue_keeps_both_readers_of_its_value(lead):
    # regression: GELU reads the dense layer's value twice (0.5 * x * (1 + erf(x / sqrt 2)));
    # its blocks inlined one by one into the kernel's output left a reader of a buffer no
    # longer written (BERT's intermediate layers did not build)
    func = T.matmul_gelu_func((*lead, 7, 40), 24)
    _check(func, "cpu-matmul", TARGETS[0])


def test_parallel_loops_match_blocking():
    func = T.schedule(T.conv2d_func((1, 8, 6, 30), (40, 8, 3, 3), padding=1), TARGETS[0])
    blocking = blocking_of(func)
    assert blocking.grid["parallel"] in T.parallel_extents(func)
    assert blocking.block_shape["oc"] % blocking.vector_lanes == 0
    assert blocking.vector_lanes == 16  # AVX-512 from mcpu


@pytest.mark.parametrize(("m", "k", "n", "cores", "tasks"), [
    (1, 1024, 500, 16, 15),  # 15 blocks of 32 columns, one a task (was 1 task of 15)
    (1, 1024, 4096, 16, 16),  # 128 blocks, 8 a task (was 16 a task: 8 tasks on 16 cores)
    (3, 1024, 500, 16, 15),  # a 3-row GEMM tile alike
    (1, 1024, 500, 2, 1),  # the 2-vCPU dev VM: grouped (spreading measured 2.2x slower there)
    (1, 64, 500, 16, 1),  # a 121 KB weight: one task (the thread pool's wake-up costs more)
])  # fmt: skip
def test_large_matmul_weights_are_spread_over_the_cores(m, k, n, cores, tasks):
    """Regression: grouping up to 16 column blocks a task left GEMVs of N <= 512
    on one thread of the H100 host's 16 (K 4096, N 500: 405 -> 79 us once spread)."""
    target = {**TARGETS[0], "num-cores": cores}
    func = T.matmul_func(m, k, n)
    assert blocking_of(T.schedule(func, target)).num_blocks == tasks
    assert T.check_cpu(func, target) <= TOL
