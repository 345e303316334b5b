"""Vectorised loops of any extent: a run of whole vectors, then power-of-two tails.

TVM vectorises a loop whose extent the vector width divides. A write-out loop whose extent
it does not (an output row of 7, 14 or 28 floats on 16 lanes) is left to LLVM, which may
vectorise the loop around it instead: on AVX-512 it wrote a 14x14 depthwise output with a
masked gather and a masked scatter per column, across rows. Cut into pieces of whole
vectors, each piece is a vectorised loop of its own, read and written contiguously.
"""

from __future__ import annotations

from tvm import tirx
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import LoopRV


def pieces(extent: int, lanes: int) -> list[int]:
    """``extent`` as whole vectors of ``lanes``, then halving power-of-two tails.

    >>> pieces(14, 16), pieces(196, 16), pieces(49, 16), pieces(64, 16)
    ([8, 4, 2], [192, 4], [48, 1], [64])
    """
    main = extent // lanes * lanes
    out = [main] if main else []
    rest, width = extent - main, lanes // 2
    while rest and width:
        if rest >= width:
            out.append(width)
            rest -= width
        width //= 2
    return out


def vectorize_pieces(sch: Schedule, loop: LoopRV, lanes: int) -> None:
    """Vectorise ``loop`` (a constant extent) piece by piece (:func:`pieces`)."""
    sizes = pieces(int(sch.get(loop).extent), lanes)
    # loop_partition infers the last piece; it takes no partition into one piece
    parts = (sch.loop_partition(loop, [*sizes[:-1], None])
             if len(sizes) > 1 else [loop])
    for part, size in zip(parts, sizes, strict=True):
        width = min(size, lanes)
        if size > width:
            part = sch.split(part, [None, width])[-1]
        if width > 1:
            sch.vectorize(part)


def vectorize_innermost(sch: Schedule, block: str, lanes: int) -> None:
    """Vectorise the innermost loop of ``block`` piece by piece where the schedule left it a
    plain serial loop of a constant extent of at least half a vector.

    Shorter loops are left as they are: a 7-column depthwise row on 16 lanes ran 1.07x
    slower in pieces of 4, 2 and 1 (``benchmarks/cpu_vector_tails.py``)."""
    loop = sch.get_loops(sch.get_sblock(block))[-1]
    node = sch.get(loop)
    serial = node.kind == tirx.ForKind.SERIAL and not node.annotations
    if not serial or not isinstance(node.extent, tirx.IntImm) or int(node.extent) < lanes // 2:
        return
    vectorize_pieces(sch, loop, lanes)
