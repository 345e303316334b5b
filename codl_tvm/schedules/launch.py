"""One parallel launch per CPU kernel (``KernelVariants.cpu_one_launch``).

A scheduled CPU kernel is often a sequence of parallel passes (the 1x1 GEMM's input pack,
GEMM and unpack; the direct conv's pad, conv and unpack; Winograd's transforms and GEMMs).
LLVM code for each ``T.parallel`` loop at the root is one ``TVMBackendParallelLaunch``: the
thread pool hands the loop's chunks to every worker and joins them. Where every root
statement of the kernel is such a loop, :func:`one_launch` wraps them in TVM's
``pragma_parallel_launch_point`` with a ``pragma_parallel_barrier_when_finish`` after each
but the last: the workers are handed the kernel once, each runs its static chunk of every
loop in turn, and a barrier separates the loops. The chunks are those each loop's own launch
gave (``CodeGenCPU``: ``ceil(extent / workers)`` consecutive iterations a worker).

On the GPU machine's 16-core Sapphire Rapids three back-to-back launches of a trivial loop
took 11.6-12.0 us and one launch with two barriers 6.7-7.2 us (2.2-3.7 against 1.7-2.3 on
2 cores of the dev host; ``benchmarks/cpu_one_launch.py``).
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.s_tir import SBlock, SBlockRealize

LAUNCH = "pragma_parallel_launch_point"
BARRIER = "pragma_parallel_barrier_when_finish"


def _pragma(key: str, body: tirx.Stmt) -> tirx.Stmt:
    return tirx.AttrStmt(tirx.IntImm("int32", 0), key, tirx.IntImm("int32", 1), body)


def root_loops(func: tirx.PrimFunc) -> list[tirx.Stmt] | None:
    """The statements of ``func``'s root block where every one is a parallel loop
    (:func:`_parallel`), else None (a statement outside a parallel loop would run once per
    worker in one launch)."""
    realize = func.body
    if not isinstance(realize, SBlockRealize):
        return None
    body = realize.block.body
    stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    if all(_parallel(s) for s in stmts):
        return stmts
    return None


def _parallel(stmt: tirx.Stmt) -> bool:
    """A parallel loop of two or more iterations: lowering drops a loop of one, and its body
    would then run on every worker of the launch."""
    return (isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.PARALLEL
            and isinstance(stmt.extent, tirx.IntImm) and int(stmt.extent) > 1)


def one_launch(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its root parallel loops in one launch, barriers between them; as it is
    where it has fewer than two such loops or any other root statement."""
    loops = root_loops(func)
    if loops is None or len(loops) < 2:
        return func
    body = _pragma(LAUNCH, tirx.SeqStmt([_pragma(BARRIER, s) for s in loops[:-1]] + loops[-1:]))
    realize, block = func.body, func.body.block
    new = SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, body, block.init,
                 block.alloc_buffers, block.match_buffers, block.annotations)
    return func.with_body(SBlockRealize(realize.iter_values, realize.predicate, new))


def is_cpu(target: tvm.target.Target) -> bool:
    return target.kind.name == "llvm"
