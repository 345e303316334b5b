"""What each device computes of a split unit (one op, or a chain of ops sharing one split).

H: the last op's output rows are cut by the ratio (GPU on top); each op's rows are propagated
back to the head through its window (Fig. 12 of CoDL), so inside a chain every device reads only
rows it made itself. OC: the head's channel units are cut by the ratio and channel-local ops
after it keep the same channels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tvm

from .geometry import RowPart, chain_row_parts, row_chunks, rows_back, split_count
from .graph import AnchorOp
from .split_rules import RULES, Unsplittable

ROLE_ORDER: tuple[str, str] = ("gpu", "cpu")


@dataclass(frozen=True)
class ChannelPart:
    """Channels one device computes of one op in an OC split."""

    units: tuple[int, int]  # head op only: the unit range given to the rule's emitter
    src: tuple[int, int] | None  # input channels read (None: all of them)
    out: tuple[int, int]  # output channels produced


def h_parts(ops: list[AnchorOp], ratio: float) -> dict[str, list[RowPart]]:
    """Per role, the row part of every op of the unit (same order as ``ops``):
    :func:`codl_tvm.geometry.chain_row_parts`, as the planner cuts them."""
    last = ops[-1]
    rows = last.out_shape[RULES[last.kind].h_axis(last.call)]
    parts = chain_row_parts(_windows(ops), rows, ratio)
    if parts is None:
        raise Unsplittable(f"{last.op_id}: a part of the H split at {ratio} gets no rows, or "
                           "reads only padding rows")
    return parts


def cpu_row_chunks(ops: list[AnchorOp], cpu: list[RowPart], max_chunks: int
                   ) -> list[list[RowPart]]:
    """The CPU's part of an H split (``cpu``: :func:`h_parts`'s) as chunks of its last op's
    rows (:func:`codl_tvm.geometry.row_chunks`), each with the row part of every op; the
    part whole where it has too few rows or a chunk would read padding only."""
    last = ops[-1]
    out_rows = last.out_shape[RULES[last.kind].h_axis(last.call)]
    row_bytes = math.prod(last.out_shape) * _elem_bytes(last) / out_rows
    windows = _windows(ops)
    chunks = [rows_back(windows, out)
              for out in row_chunks(*cpu[-1].out, max_chunks, row_bytes)]
    if len(chunks) < 2 or any(c is None for c in chunks):
        return [cpu]
    return chunks


def _windows(ops: list[AnchorOp]) -> list[tuple]:
    """Each op's H window and input rows, as :mod:`codl_tvm.geometry` takes a chain."""
    return [(RULES[op.kind].window(op.call), op.in_shape[RULES[op.kind].h_axis(op.call)])
            for op in ops]


def _elem_bytes(op: AnchorOp) -> int:
    return tvm.DataType(op.out_var.ty.dtype).bits // 8


def oc_parts(ops: list[AnchorOp], ratio: float) -> dict[str, list[ChannelPart]]:
    """Per role, the channel part of every op of the unit (same order as ``ops``)."""
    head = ops[0]
    for op in ops[1:]:
        if not RULES[op.kind].channel_local(op.call):
            raise Unsplittable(
                f"{op.op_id} reads all input channels, so it cannot join an OC chain"
            )
    units = RULES[head.kind].units(head.call)
    n_gpu = split_count(units.count, ratio)
    parts: dict[str, list[ChannelPart]] = {}
    for role, (u0, u1) in {"gpu": (0, n_gpu), "cpu": (n_gpu, units.count)}.items():
        src = None if units.in_per is None else (u0 * units.in_per, u1 * units.in_per)
        out = (u0 * units.out_per, u1 * units.out_per)
        chain = [ChannelPart((u0, u1), src, out)]
        for op in ops[1:]:
            mult = op.out_shape[1] // op.in_shape[1]
            chain.append(ChannelPart((out[0], out[1]), out, (out[0] * mult, out[1] * mult)))
            out = chain[-1].out
        parts[role] = chain
    return parts


def split_extent(op: AnchorOp, dim: str) -> int:
    """Rows (H) or channel units (OC) ``op`` could be split into; 0 when it cannot be split."""
    rule = RULES[op.kind]
    try:
        if dim == "H":
            rule.window(op.call)
            return op.out_shape[rule.h_axis(op.call)]
        return rule.units(op.call).count
    except Unsplittable:
        return 0


def whole_role(ops: list[AnchorOp], dim: str, ratio: float) -> str | None:
    """``"gpu"``/``"cpu"`` when the ratio gives one device everything, else None."""
    head, last = ops[0], ops[-1]
    if dim == "H":
        total = last.out_shape[RULES[last.kind].h_axis(last.call)]
    else:
        total = RULES[head.kind].units(head.call).count
    n_gpu = split_count(total, ratio)
    if n_gpu == total:
        return "gpu"
    if n_gpu == 0:
        return "cpu"
    return None
