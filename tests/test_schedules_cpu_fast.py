"""1x1 GEMM and Winograd F(2x2,3x3) CPU kernels equal the unscheduled PrimFunc (rel. err <= 1e-5)
on every sub-op shape the partitioner makes, record a consistent blocking, and are dispatched
where their measured predicate says so."""

from __future__ import annotations

import dataclasses
import math
import re

import hypothesis.strategies as st
import pytest
import tvm
from hypothesis import HealthCheck, given, settings

from codl_tvm.predictor.machine import reference
from codl_tvm.schedules import blocking_of, dispatch
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.analysis import analyze
from codl_tvm.schedules.target_info import target_info

TOL = 1e-5
AVX512 = T.AVX512_TARGET  # kernels built for it run as T.runnable_here has them
TARGETS = [AVX512, T.CPU_TARGET]  # AVX-512 lanes (or this host's widest) and the SSE default
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RULES = {"gemm": dispatch.cpu_gemm1x1, "winograd": dispatch.cpu_winograd_f23}
ALGORITHM = {"gemm": "gemm-1x1", "winograd": "winograd-2x2-3x3"}


def _apply(func, kind: str, target: dict):
    """The func scheduled by ``kind``'s rule directly (whatever the dispatch predicate says)."""
    tgt = tvm.target.Target(target)
    new, blocking = RULES[kind](func, analyze(func), tgt, target_info(tgt), kind)
    return new, blocking


def _err(func, kind: str, target: dict) -> float:
    target = T.runnable_here(target)  # the kernel runs here
    new, _ = _apply(func, kind, target)
    args = T.random_args(func)
    want = T.run(T.build(func, {"kind": "llvm"}), func, args)
    return T.rel_error(T.run(T.build(new, target), new, args), want)


@st.composite
def cases(draw, k: int, strides: tuple[tuple[int, int], ...] = ((1, 1),)):
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, k - pads[0] - pads[2]), 9))
    w = draw(st.integers(max(1, k - pads[1] - pads[3]), 12))
    ic, oc = draw(st.integers(1, 20)), draw(st.integers(1, 40))
    return dict(x=(1, ic, h, w), w=(oc, ic, k, k), padding=pads, bias_relu=draw(st.booleans()),
                strides=draw(st.sampled_from(strides)))  # fmt: skip


@pytest.mark.parametrize("target", TARGETS, ids=["avx512", "sse"])
@SETTINGS
@given(case=cases(k=1, strides=((1, 1), (2, 2), (2, 1), (1, 3))))
def test_gemm_1x1_equivalent(case, target):
    """At stride > 1 too: its input pack samples the strided pixels."""
    func = T.conv2d_func(case.pop("x"), case.pop("w"), **case)
    assert _err(func, "gemm", target) <= TOL


@pytest.mark.parametrize("target", TARGETS, ids=["avx512", "sse"])
@SETTINGS
@given(case=cases(k=3))
def test_winograd_equivalent(case, target):
    func = T.conv2d_func(case.pop("x"), case.pop("w"), **case)
    assert _err(func, "winograd", target) <= TOL


AWKWARD = [  # (kind, x, w, attrs): H-split sub-op shapes and friends
    ("gemm", (1, 16, 1, 13), (21, 16, 1, 1), {}),  # one row, OC 21
    ("gemm", (1, 32, 7, 13), (125, 32, 1, 1), {}),  # odd rows, OC 125
    ("gemm", (1, 8, 3, 5), (40, 8, 1, 1), dict(padding=(1, 0, 0, 2))),  # asymmetric pad
    ("gemm", (1, 64, 5, 13), (70, 64, 1, 1), dict(bias_relu=True)),  # epilogue, OC % 16 != 0
    ("gemm", (2, 8, 3, 4), (9, 8, 1, 1), {}),  # batch 2
    ("winograd", (1, 16, 3, 13), (70, 16, 3, 3), dict(padding=(0, 1, 0, 1))),  # one output row
    ("winograd", (1, 16, 4, 13), (40, 16, 3, 3), dict(padding=(1, 1, 0, 1))),  # 3 rows, top pad
    ("winograd", (1, 16, 6, 11), (40, 16, 3, 3), dict(padding=(0, 1, 2, 1))),  # bottom pad only
    ("winograd", (1, 8, 7, 9), (19, 8, 3, 3), dict(padding=1, bias_relu=True)),  # epilogue
    ("winograd", (1, 256, 6, 10), (32, 256, 3, 3), dict(padding=1)),  # long reduction (numerics)
    ("winograd", (2, 4, 5, 5), (8, 4, 3, 3), dict(padding=1)),  # batch 2
]


@pytest.mark.parametrize("kind, x, w, attrs", AWKWARD)
def test_awkward_shapes(kind, x, w, attrs):
    assert _err(T.conv2d_func(x, w, **attrs), kind, AVX512) <= TOL


@pytest.mark.parametrize("kind, x, w", [
    ("gemm", (1, 32, 5, 13), (40, 32, 1, 1)),
    ("winograd", (1, 16, 7, 9), (40, 16, 3, 3)),
])
def test_blocking_matches_parallel_loops(kind, x, w):
    new, blocking = _apply(T.conv2d_func(x, w, padding=(1, 1, 1, 1) if w[2] == 3 else 0),
                           kind, AVX512)
    assert blocking.algorithm == ALGORITHM[kind]
    assert blocking.grid["parallel"] == blocking.num_blocks
    assert blocking.num_blocks in T.parallel_extents(new)
    assert blocking.vector_lanes == 16 and blocking.cores == 2
    unit = blocking.basic_unit_shape
    assert blocking.block_size % blocking.basic_unit_size == 0
    assert max(unit.values()) == 16  # one SIMD vector of pixels (GEMM) or channels (Winograd)
    # the blocks cover the output: tasks x block >= output (tails are computed and dropped)
    assert blocking.num_blocks * blocking.block_size >= blocking.output_size


DISPATCH = [  # (x, w, attrs, rule) following the predicates in cpu_gemm.wins / cpu_winograd.wins
    ((1, 512, 13, 13), (125, 512, 1, 1), {}, "cpu-conv2d-gemm-1x1"),
    ((1, 128, 32, 32), (21, 128, 1, 1), {}, "cpu-conv2d-gemm-1x1"),
    ((1, 1024, 13, 13), (512, 1024, 1, 1), {}, "cpu-conv2d-gemm-1x1"),  # one column tile
    ((1, 128, 32, 32), (128, 128, 1, 1), {}, "cpu-conv2d-gemm-1x1"),  # 42 columns for 32
    ((1, 8, 6, 6), (16, 8, 1, 1), dict(strides=2), "cpu-conv2d-direct-nchwc"),
    # every 1x1 at stride 1, the direct tile's fit aside (0.65x the direct conv's
    # time on 274 sub-ops of the H100 host, 0.60x on the dev CPU)
    ((1, 256, 26, 26), (256, 256, 1, 1), {}, "cpu-conv2d-gemm-1x1"),
    ((1, 128, 104, 104), (64, 128, 1, 1), {}, "cpu-conv2d-gemm-1x1"),
    ((1, 256, 26, 26), (256, 256, 1, 1), dict(strides=2), "cpu-conv2d-direct-nchwc"),
    ((1, 1024, 3, 13), (125, 1024, 1, 1), {}, "cpu-conv2d-gemm-1x1"),  # 3-row part
    ((1, 64, 26, 26), (128, 64, 3, 3), dict(padding=1), "cpu-conv2d-winograd"),
    ((1, 256, 3, 26), (512, 256, 3, 3), dict(padding=(0, 1, 0, 1)), "cpu-conv2d-winograd"),
    ((1, 64, 26, 26), (64, 64, 3, 3), dict(padding=1), "cpu-conv2d-winograd"),  # 64 to 64
    ((1, 32, 26, 26), (64, 32, 3, 3), dict(padding=1), "cpu-conv2d-direct-nchwc"),  # few ch.
    ((1, 3, 26, 26), (32, 3, 3, 3), dict(padding=1), "cpu-conv2d-direct-nchwc"),  # IC 3
    ((1, 64, 26, 26), (64, 64, 3, 3), dict(strides=2), "cpu-conv2d-direct-nchwc"),
    ((1, 64, 12, 12), (64, 64, 5, 5), {}, "cpu-conv2d-direct-nchwc"),
]


def test_gemm_always_sends_every_1x1_to_the_gemm_and_the_mirror_follows(monkeypatch):
    """``KernelVariants(cpu_gemm="always")`` measures the GEMM where the direct conv wins
    (the 1x1 stride-2 convs); the predictor's dispatch mirror follows the variants
    its machine records. The retired ``CODL_CPU_GEMM`` changes neither."""
    from codl_tvm.predictor.mirror import kernel
    from codl_tvm.predictor.opspec import OpSpec
    from codl_tvm.tiling import KernelVariants, use_variants

    info = analyze(T.conv2d_func((1, 256, 26, 26), (256, 256, 1, 1), strides=2))
    spec = OpSpec("conv2d", 26, 26, 256, 256, 1, 1, 2, 2)
    t = target_info(tvm.target.Target(AVX512))
    monkeypatch.setenv("CODL_CPU_GEMM", "always")  # ignored
    assert dispatch.select_rules(info, t)[0].name == "cpu-conv2d-direct-nchwc"
    assert kernel("cpu", spec, reference()).algorithm == "direct-nchwc"
    always = KernelVariants(cpu_gemm="always")
    with use_variants(always):
        assert dispatch.select_rules(info, t)[0].name == "cpu-conv2d-gemm-1x1"
    gemm = dataclasses.replace(reference(), variants=always)
    assert kernel("cpu", spec, gemm).algorithm == "gemm-1x1"


@pytest.mark.parametrize("x, w, attrs, rule", DISPATCH)
def test_dispatch_follows_predicates(x, w, attrs, rule):
    info = analyze(T.conv2d_func(x, w, **attrs))
    rules = dispatch.select_rules(info, target_info(tvm.target.Target(AVX512)))
    assert rules[0].name == rule


def test_compile_path_uses_new_rule():
    func = T.conv2d_func((1, 64, 4, 32), (21, 64, 1, 1), bias_relu=True)
    scheduled = T.schedule(func, AVX512)
    assert blocking_of(scheduled).rule == "cpu-conv2d-gemm-1x1"
    assert T.check_cpu(func, AVX512) <= TOL


@pytest.mark.parametrize("x, w, algorithm", [
    ((1, 3, 20, 23), (40, 3, 3, 3), "direct-nchwc"),  # 2 channel blocks, a ragged last one
    ((1, 64, 10, 9), (136, 64, 3, 3), "winograd-2x2-3x3"),  # ragged last block
])  # fmt: skip
def test_unpack_reads_each_packed_row_once(x, w, algorithm):
    """Regression: the NCHWc -> NCHW unpack ran channel-outer, re-reading the whole
    packed plane for every channel (YOLO-V2's 416x416 3->32 conv: 2.5-3x slower on the dev
    CPU). Now a task is one (channel block, row) and its channels run inside it, also with a
    fused epilogue inlined into the unpack."""
    func = T.conv2d_func(x, w, padding=1, bias_relu=True)
    new = T.schedule(func, AVX512)
    blocking = blocking_of(new)
    assert blocking.algorithm == algorithm
    ocb = blocking.block_shape["oc"]
    sch = tvm.s_tir.Schedule(new)
    oc, oh, ow = w[0], x[2], x[3]
    # the row's columns are cut into vectors (cpu_vector_tails): each piece a block of its
    # own, under a block that holds them all
    names = re.findall(r'sblock\("(codl_unpack[^"]*)"\)', new.script())
    (common,) = [n for n in names if n.endswith("_common")]
    loops = [sch.get(lp) for lp in sch.get_loops(sch.get_sblock(common))]
    assert [int(lp.extent) for lp in loops] == [-(-oc // ocb) * oh, ocb]
    assert loops[0].kind == tvm.tirx.ForKind.PARALLEL
    pieces = [n for n in names if not n.endswith(("_common", "_partition"))]
    columns = sum(math.prod(int(sch.get(lp).extent) for lp in sch.get_loops(sch.get_sblock(n)))
                  for n in pieces)
    assert columns == ow
    assert T.check_cpu(func, AVX512) <= TOL


def test_winograd_v_planes_are_skewed_off_the_l1_set_span():
    """Regression: POSENET's 32x32 256->128 parts of 16 rows store V planes
    143360 B (35 x 4 KiB) apart, all 16 stores of a tile in one L1 set. The schedule aligns
    the plane stride one cache line past a multiple of 4 KiB; the result stays exact."""
    func = T.conv2d_func((1, 256, 16, 32), (128, 256, 3, 3), padding=(0, 1, 1, 1))
    new, _ = _apply(func, "winograd", AVX512)
    # the V block carries the stride rule: [buffer, axis, factor, offset]
    assert '"buffer_dim_align": [[0, 1, 1024, 16]]' in new.script()
    small = T.conv2d_func((1, 64, 8, 12), (32, 64, 3, 3), padding=(0, 1, 1, 1))
    assert _err(small, "winograd", AVX512) <= TOL
