"""The CPU's grouped/depthwise conv in row blocks (``KernelVariants.cpu_depthwise_blocks``): a
task computes a block of rows of one channel, pads the input rows it reads and writes its rows
out itself. It equals the unscheduled PrimFunc on awkward shapes (blocks that do not divide
the rows, one-row outputs, stride 2, dilation, channel multipliers, groups, fused epilogues),
and the predictor's mirror counts the tasks the kernel runs."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from codl_tvm import tiling
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.mirror import kernel
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.tiling import KernelVariants, use_variants

TOL = 1e-5
ONE_CORE = {"kind": "llvm", "num-cores": 1}  # few cores: blocks of several rows


@st.composite
def grouped_cases(draw):
    groups = draw(st.integers(1, 12))
    icg, mult = draw(st.sampled_from([(1, 1), (1, 2), (2, 1), (3, 2)]))
    kh, kw = draw(st.sampled_from([(3, 3), (5, 5), (3, 1), (1, 3)]))
    sh, sw = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    dil = draw(st.sampled_from([1, 2]))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dil * (kh - 1) + 1 - pads[0] - pads[2]), 30))
    w = draw(st.integers(max(1, dil * (kw - 1) + 1 - pads[1] - pads[3]), 21))
    return dict(x=(1, groups * icg, h, w), w=(groups * icg * mult, icg, kh, kw),
                strides=(sh, sw), dilation=(dil, dil), padding=pads, groups=groups,
                bias_relu=draw(st.booleans()))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=grouped_cases(), target=st.sampled_from([ONE_CORE, T.CPU_TARGET]))
def test_row_blocks_equal_the_reference(case, target):
    x, w = case.pop("x"), case.pop("w")
    func = T.conv2d_func(x, w, **case)
    assert T.check_cpu(func, target) <= TOL
    with use_variants(KernelVariants(cpu_depthwise_blocks=False)):
        assert T.check_cpu(func, target) <= TOL


def test_a_task_pads_and_writes_out_its_own_rows():
    """Blocks on: one parallel loop (the tasks) with the pad and the write-out inside; off:
    the pad and the write-out are parallel passes of their own."""
    func = T.conv2d_func((1, 8, 20, 20), (8, 1, 3, 3), groups=8, padding=1, bias_relu=True)
    new = T.schedule(func, ONE_CORE)
    rows = tiling.depthwise_rows(1, 8, 20, 1)
    assert rows == 20 and T.parallel_extents(new) == [8]
    assert blocking_of(new).block_shape["h"] == rows
    with use_variants(KernelVariants(cpu_depthwise_blocks=False)):
        old = T.schedule(func, ONE_CORE)
    assert sorted(T.parallel_extents(old)) == sorted([8 * 22, 8 * 20, 8 * 20])


def test_rows_keep_tasks_for_every_core():
    assert tiling.depthwise_rows(1, 960, 7, 16) == 7  # whole channels: 960 tasks
    assert tiling.depthwise_rows(1, 32, 112, 16) == 28  # 128 tasks, 8 per core
    assert tiling.depthwise_rows(1, 4, 9, 16) == 1  # too few rows to block
    assert tiling.depthwise_rows(1, 960, 7, 16, blocks=False) == 1


def test_the_predictor_mirror_counts_the_tasks_the_kernel_runs():
    """The shipped predictor's samples ran one row per task (its file predates the field);
    a predictor of newer samples mirrors the row blocks."""
    old = reference()
    assert not old.variants.cpu_depthwise_blocks
    new = dataclasses.replace(old, variants=KernelVariants())
    spec = OpSpec("depthwise", 56, 56, 144, 144, 3, 3, 1, 1, pad=(1, 1, 1, 1), groups=144)
    rows = tiling.depthwise_rows(1, 144, 56, new.cores)
    assert rows > 1
    assert kernel("cpu", spec, new).num_blocks == 144 * -(-56 // rows)
    assert kernel("cpu", spec, old).num_blocks == 144 * 56
