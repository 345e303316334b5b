"""Consecutive-op analysis for chains: which anchors feed only the next one."""

from __future__ import annotations

import tvm

from .graph import entry_function, find_anchors
from .split_rules import RULES


def consecutive_runs(mod: tvm.IRModule, dim: str, op_ids: list[str]) -> list[list[str]]:
    """Maximal runs of ``op_ids`` where each op reads exactly the previous op's output.

    For ``dim="OC"`` a run continues only through channel-local ops (pooling, depthwise).
    """
    anchors = [a for a in find_anchors(entry_function(mod)) if a.op_id in set(op_ids)]
    runs: list[list[str]] = []
    prev = None
    for a in anchors:
        joins = prev is not None and a.data.same_as(prev.out_var) and prev.out_uses == 1
        if joins and dim == "OC":
            joins = RULES[a.kind].channel_local(a.call)
        if joins:
            runs[-1].append(a.op_id)
        else:
            runs.append([a.op_id])
        prev = a
    return runs
