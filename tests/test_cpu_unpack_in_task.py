"""A task of the CPU's direct conv unpacks its own register tile
(``KernelVariants.cpu_unpack_in_task``): the unpack (epilogue included) runs under the conv's
parallel task loop, the packed result is a tile on the task's stack, the kernel equals the
unscheduled PrimFunc on awkward shapes, and the predictor prices what its samples ran."""

from __future__ import annotations

import dataclasses
import re

import hypothesis.strategies as st
from hypothesis import HealthCheck, example, given, settings
from tvm.s_tir import Schedule

from codl_tvm.predictor.cpu_terms import CPU_CONV_TERMS, cpu_conv
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.tiling import KernelVariants, use_variants

TOL = 1e-5
DIRECT = "cpu-conv2d-direct-nchwc"


def task_loop_of(func, block: str):
    sch = Schedule(func)
    return sch.get(sch.get_loops(sch.get_sblock(block))[0])


def test_the_unpack_runs_in_the_conv_task_and_its_own_pass_without_the_variant():
    func = T.conv2d_func((1, 3, 30, 30), (32, 3, 3, 3), strides=(2, 2), padding=(1,) * 4,
                         bias_relu=True)
    new = T.schedule(func, T.CPU_TARGET)
    assert blocking_of(new).rule == DIRECT
    assert task_loop_of(new, "codl_unpack").same_as(task_loop_of(new, "codl_conv_update"))
    with use_variants(KernelVariants(cpu_unpack_in_task=False)):
        old = T.schedule(func, T.CPU_TARGET)
    assert not task_loop_of(old, "codl_unpack").same_as(task_loop_of(old, "codl_conv_update"))


def conv_allocations_bytes(func) -> dict[str, int]:
    """Bytes of each ``codl_conv*`` buffer the compiled kernel allocates (stack or workspace)."""
    ir = T.build(func, T.CPU_TARGET).mod.inspect_source("ll")
    found = re.findall(r"%(codl_conv\w*) = (?:tail call ptr %\d+\(i32 1, i32 %dev_id, i64 (\d+)"
                       r"|alloca \[(\d+) x float\])", ir)
    return {name: int(work or 0) + 4 * int(stack or 0) for name, work, stack in found}


def test_the_packed_result_is_a_tile_of_the_task():
    func = T.conv2d_func((1, 3, 30, 30), (32, 3, 3, 3), strides=(2, 2), padding=(1,) * 4)
    new = T.schedule(func, T.CPU_TARGET)
    ocb, xt = (blocking_of(new).block_shape[k] for k in ("oc", "w"))
    assert max(conv_allocations_bytes(new).values()) <= ocb * xt * 4
    with use_variants(KernelVariants(cpu_unpack_in_task=False)):
        old = T.schedule(func, T.CPU_TARGET)
    packed = 32 * 15 * 15 * 4  # OC x OH x OW floats (OW whole tiles here)
    assert max(conv_allocations_bytes(old).values()) >= packed


# batch 2, channels that do not fill the last block, columns that do not fill the last tile,
# one output row or column, stride 2 (a 1x1 window reads a sampled copy), dilation, wide pads
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.sampled_from([1, 2]), ic=st.integers(1, 9), oc=st.integers(1, 40),
       h=st.integers(1, 13), w=st.integers(1, 19), k=st.sampled_from([1, 3, 5]),
       stride=st.sampled_from([1, 2]), dilation=st.sampled_from([1, 2]),
       pad=st.integers(0, 3))
@example(n=1, ic=3, oc=17, h=9, w=15, k=3, stride=2, dilation=1, pad=1)
@example(n=2, ic=4, oc=8, h=1, w=1, k=1, stride=1, dilation=1, pad=0)
def test_it_equals_the_unscheduled_conv(n, ic, oc, h, w, k, stride, dilation, pad):
    span = (k - 1) * dilation + 1
    if h + 2 * pad < span or w + 2 * pad < span:
        return
    func = T.conv2d_func((n, ic, h, w), (oc, ic, k, k), strides=(stride, stride),
                         padding=(pad,) * 4, dilation=(dilation, dilation), bias_relu=True)
    if blocking_of(T.schedule(func, T.CPU_TARGET)).rule != DIRECT:
        return
    assert T.check_cpu(func) <= TOL


def test_the_predictor_prices_the_unpack_its_samples_ran():
    old = reference()  # the shipped file predates the variant
    assert not old.variants.cpu_unpack_in_task
    new = dataclasses.replace(old, variants=dataclasses.replace(old.variants,
                                                                cpu_unpack_in_task=True))
    posenet = OpSpec("conv2d", 27, 256, 3, 64, 3, 3, 1, 1, pad=(1, 1, 1, 1))  # remote tiles
    yolo = OpSpec("conv2d", 416, 416, 3, 32, 3, 3, 1, 1, pad=(1, 1, 1, 1))  # rows past L1
    changed = ("unpack_remote", "unpack_l1", "written_past_l2s")
    for spec, term in ((posenet, "unpack_remote"), (yolo, "unpack_l1"),
                       (yolo, "written_past_l2s")):
        before, after = (dict(zip(CPU_CONV_TERMS, cpu_conv(spec, m), strict=True))
                         for m in (old, new))
        assert after[term] < before[term]
        assert after["unpack_remote"] == after["unpack_l1"] == 0
        assert {k: v for k, v in after.items() if k not in changed} == \
            {k: v for k, v in before.items() if k not in changed}
