"""GPU kernels through DLight rules, and the launch geometry read back from the result.

conv2d (groups 1) goes to DLight ``Matmul`` as an implicit GEMM: DLight treats the
``(OC) x (OH*OW) x (IC*KH*KW)`` reduction as a matmul, stages the im2col tile and the weight
tile in shared memory and keeps a register tile per thread. Depthwise/grouped conv and
pooling are memory-bound and get the one-output-per-thread ``Fallback``; matmul goes to
``GEMV``/``LowBatchGEMV``/``Matmul``.
"""

from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.s_tir import SBlockRealize, Schedule
from tvm.s_tir import dlight as dl

from .analysis import OpInfo
from .blocking import Blocking
from .target_info import TargetInfo

DLIGHT_RULES = {
    "matmul": dl.gpu.Matmul,
    "gemv": dl.gpu.GEMV,
    "low_batch_gemv": dl.gpu.LowBatchGEMV,
    "reduction": dl.gpu.Reduction,
    "general_reduction": dl.gpu.GeneralReduction,
    "fallback": dl.gpu.Fallback,
}


def apply_dlight(
    func: tirx.PrimFunc, target: tvm.target.Target, names: tuple[str, ...]
) -> tuple[tirx.PrimFunc, str] | None:
    """First DLight rule of ``names`` that schedules ``func`` (and binds threads)."""
    for name in names:
        try:
            sch = DLIGHT_RULES[name]().apply(func, target, False)
        except Exception:  # noqa: BLE001 - a rule that cannot schedule the func is skipped
            sch = None
        if isinstance(sch, list):
            sch = sch[0] if sch else None
        if sch is None:
            continue
        out = sch.mod["main"]
        if launch_extents(out):
            return out, name
    return None


GLOBAL_REDUCE_THREADS = 256  # the most threads of a cross-thread reduction's block


def cross_thread_reduce(func: tirx.PrimFunc, info: OpInfo) -> tirx.PrimFunc | None:
    """One block per output of a 1x1-output pool, its window split over up to
    :data:`GLOBAL_REDUCE_THREADS` threads that reduce across themselves (TVM's allreduce).

    DLight's ``Reduction`` schedules sums only (average pools, instance norm's mean); a global
    max pool fell to ``Fallback``, one thread per channel looping over the whole window. None
    where the pool has a prologue or an epilogue (the caller falls back)."""
    if info.prologue or info.epilogue or info.main_block is None:
        return None
    sch = Schedule(func)
    loops = sch.get_loops(sch.get_sblock(info.main_block))
    if len(loops) != 6:
        return None
    spatial, window = sch.fuse(*loops[:4]), sch.fuse(*loops[4:])
    threads = min(GLOBAL_REDUCE_THREADS, 1 << max(5, (info.reduce_size - 1).bit_length()))
    _, inner = sch.split(window, [None, threads])
    sch.bind(spatial, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")
    return sch.mod["main"]


def _children(stmt: object) -> list[object]:
    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, SBlockRealize):
        block = stmt.block
        return [block.body] + ([block.init] if block.init is not None else [])
    kids = []
    for field in ("body", "then_case", "else_case"):
        child = getattr(stmt, field, None)
        if child is not None and isinstance(child, tirx.Stmt):
            kids.append(child)
    return kids


def launch_extents(func: tirx.PrimFunc) -> dict[str, int]:
    """Extents of ``blockIdx.*``/``threadIdx.*`` bound loops in ``func`` (max per tag)."""
    found: dict[str, int] = {}
    stack = [func.body]
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, tirx.For) and stmt.thread_binding is not None:
            tag = str(stmt.thread_binding.thread_tag)
            if tag.startswith(("blockIdx", "threadIdx")):
                found[tag] = max(found.get(tag, 1), int(stmt.extent))
        stack.extend(_children(stmt))
    return found


def gpu_blocking(
    func: tirx.PrimFunc, info: OpInfo, t: TargetInfo, algorithm: str, rule: str
) -> Blocking:
    """Blocking of a GPU kernel from its launch grid: one block = one work-group."""
    grid = launch_extents(func)
    blocks = math.prod(v for k, v in grid.items() if k.startswith("blockIdx"))
    threads = math.prod(v for k, v in grid.items() if k.startswith("threadIdx"))
    out = math.prod(info.out_shape) if info.out_shape else 1
    per_block = math.ceil(out / blocks)
    per_thread = math.ceil(per_block / threads)
    warp = max(1, t.lanes)
    return Blocking(
        algorithm=algorithm, processor="gpu", op=info.kind, output_size=out,
        block_shape={"elements": per_block},
        basic_unit_shape={"elements": min(per_block, per_thread * warp)},
        num_blocks=blocks, cores=None, vector_lanes=warp, threads_per_block=threads,
        grid=grid, rule=rule,
    )
