"""Parallel branches: the towers of an inception block, a residual block's shortcut conv.

Where a plan puts whole branches of one group on different processors, they run at once: the
runtime issues the GPU's kernels before the host computes (:class:`~codl_tvm.passes.
IssueGpuWorkFirst`), so the CPU's branches overlap the GPU's. :func:`overlap_us` is what that
saves against running them one after the other (muLayer's branch distribution, EuroSys'19
section 5). No TVM import.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .nodes import OpNode

MAX_BRANCHES = 8


def parallel_branches(nodes: list[OpNode]) -> list[list[list[OpNode]]]:
    """Groups of branches: runs of ops (each the only reader of the previous) whose heads read
    the same value, e.g. the four towers of an inception block."""
    heads: dict[int, list[int]] = defaultdict(list)
    for i, n in enumerate(nodes):
        heads[n.input_key].append(i)
    groups = []
    for idx in heads.values():
        if len(idx) < 2:
            continue
        branches = []
        for i in idx:
            run = [nodes[i]]
            while nodes[run[-1].order].chain_next.get("H") and run[-1].order + 1 < len(nodes):
                run.append(nodes[run[-1].order + 1])
            branches.append(run)
        groups.append(branches[:MAX_BRANCHES])
    return groups


def branch_role(lay: Any, branch: list[OpNode]) -> str | None:
    """The processor a branch runs on whole, or None (split ops, or on both)."""
    roles = {lay.place(n.op_id)[0] for n in branch}
    role = roles.pop() if len(roles) == 1 else None
    return role if role in ("cpu", "gpu") else None


def overlap_us(ev: Any, nodes: list[OpNode], lay: Any) -> float:
    """Time the branches placed whole save by running at once: per group, the shorter of the
    two processors' sums of kernels of the branches it runs whole. Branches with split ops
    (or on both processors) count as run one after the other, as do the copies, which the
    serial estimate holds. 0 where the roles share cores (``ev.costs.concurrent`` false:
    the cpu-pair)."""
    if not ev.costs.concurrent:
        return 0.0
    saved = 0.0
    for branches in parallel_branches(nodes):
        roles = [branch_role(lay, branch) for branch in branches]
        if not {"cpu", "gpu"} <= set(roles):  # nothing runs beside anything (the common case)
            continue
        per = {"cpu": 0.0, "gpu": 0.0}
        for branch, role in zip(branches, roles, strict=True):
            if role is not None:
                per[role] += sum(ev.whole(n, role) for n in branch)
        saved += min(per.values())
    return saved
