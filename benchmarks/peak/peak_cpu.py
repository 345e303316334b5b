"""FP32 FMA peak microkernel for a CPU, built with TVM (so it runs runtime-only too).

Each parallel task keeps ``chains x lanes`` accumulators in registers and adds
``x[chain, lane] * y[k]`` for ``k < iters``: the products' operands are loop invariant or a
broadcast load, so the loop is one vector FMA per accumulator per step.
"""

from __future__ import annotations

import tvm
from tvm import te
from tvm.s_tir import Schedule

from codl_tvm.schedules.target_info import target_info

ITERS = 16384
INNER = 64  # y[k % INNER] stays in L1


def peak_shape(target: tvm.target.Target) -> tuple[int, int, int, int]:
    """(tasks, chains, vectors, lanes): 4 tasks per core, the conv micro-kernel's register tile."""
    t = target_info(target)
    vectors = 2
    chains = max(2, (t.vector_regs - vectors - 2) // vectors)
    return 4 * (t.cores or 1), chains, vectors, t.lanes


def peak_func(target: tvm.target.Target) -> tvm.tirx.PrimFunc:
    """acc[t, c, v, :] += y[k, c] (broadcast) * x[t, v, :] (vector): one FMA per accumulator."""
    tasks, chains, vectors, lanes = peak_shape(target)
    x = te.placeholder((tasks, vectors, lanes), name="x")
    y = te.placeholder((INNER, chains), name="y")
    ko = te.reduce_axis((0, ITERS // INNER), name="ko")
    ki = te.reduce_axis((0, INNER), name="ki")
    out = te.compute(
        (tasks, chains, vectors, lanes),
        lambda t, c, v, lane: te.sum(y[ki, c] * x[t, v, lane], axis=[ko, ki]),
        name="acc",
    )
    sch = Schedule(te.create_prim_func([x, y, out]))
    blk = sch.get_sblock("acc")
    t, c, v, lane, k0, k1 = sch.get_loops(blk)
    sch.reorder(t, k0, k1, c, v, lane)
    sch.parallel(t)
    acc = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(acc, t)
    sch.unroll(c)
    sch.unroll(v)
    sch.vectorize(lane)
    sch.decompose_reduction(blk, k0)
    return sch.mod["main"].with_attr("global_symbol", "fma_peak")


def peak_flops(target: tvm.target.Target) -> int:
    tasks, chains, vectors, lanes = peak_shape(target)
    return 2 * tasks * chains * vectors * lanes * ITERS


def peak_args_shapes(target: tvm.target.Target) -> list[list[int]]:
    tasks, chains, vectors, lanes = peak_shape(target)
    return [[tasks, vectors, lanes], [INNER, chains], [tasks, chains, vectors, lanes]]
