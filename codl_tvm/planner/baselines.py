"""Baseline planners: muLayer (EuroSys'19) and EOP (VEE'22), over the same cost sources."""

from __future__ import annotations

import itertools
from typing import Any

from .branches import overlap_us, parallel_branches
from .nodes import OpNode
from .search import Evaluator, Layout, layout_cost

MULAYER_RATIOS = (0.25, 0.5, 0.75)
KEY_SHARE = 0.95  # EOP: the fewest ops making up 95% of the time are key operators


def _faster(ev: Evaluator, n: OpNode) -> tuple[str, None, None]:
    return (min(("gpu", "cpu"), key=lambda r: ev.isolated(n, r)), None, None)


# ---- muLayer --------------------------------------------------------------------------------
def mulayer(nodes: list[OpNode], ev: Evaluator, opts: Any) -> Layout:
    """Channel-wise split of every layer at the best of 0.25/0.5/0.75, then branch
    distribution (section 5): parallel branches whole on one processor each when the best
    mapping beats splitting their layers."""
    lay = Layout()
    for n in nodes:
        cands = [(u.total_us, r) for r in MULAYER_RATIOS
                 if "OC" in n.dims and (u := ev.unit([n], "OC", r)) is not None]
        lay.ops[n.op_id] = ("split", "OC", min(cands)[1]) if cands else _faster(ev, n)
    return distribute_branches(ev, nodes, lay)


def distribute_branches(ev: Evaluator, nodes: list[OpNode], lay: Layout,
                        keep: bool = False) -> Layout:
    """muLayer's branch distribution (section 5): each group of parallel branches whole, one
    processor per branch, where the best such mapping beats the plan's estimate, which
    counts branches whole on different processors as running at once. ``keep`` (codl): a
    branch may also keep its place in ``lay`` (its splits and chains) beside the others, in
    groups of up to :data:`MAX_KEEP_BRANCHES` branches; a branch placed whole leaves its
    chains. Groups with a chain reaching outside them stay as they are."""
    moved: list[str] = []
    for branches in parallel_branches(nodes):
        members = {n.op_id for b in branches for n in b}
        chains = [c for c in lay.chains if members & set(c[0])]
        if any(n.spec is None for b in branches for n in b) or any(
                not set(c[0]) <= members for c in chains):
            continue
        before = {op: lay.place(op) for op in members}
        others = [c for c in lay.chains if c not in chains]
        choices = ("gpu", "cpu", "keep") if keep and len(branches) <= MAX_KEEP_BRANCHES else (
            "gpu", "cpu")
        best_cost, best_map = layout_cost(ev, nodes, lay), None
        for mapping in itertools.product(choices, repeat=len(branches)):
            _place(lay, branches, mapping, before, others, chains)
            cost = layout_cost(ev, nodes, lay)
            if cost < best_cost - 1e-9:
                best_cost, best_map = cost, mapping
        _place(lay, branches, best_map or ("keep",) * len(branches), before, others, chains)
        if best_map is not None and {"cpu", "gpu"} <= set(best_map):
            moved.append(branches[0][0].op_id)
    if moved:
        lay.notes.append(
            f"{len(moved)} group(s) of parallel branches ({', '.join(moved)}, ...) run whole "
            f"on both processors at once, {overlap_us(ev, nodes, lay):.0f} us saved by the "
            "estimate")
    return lay


MAX_KEEP_BRANCHES = 5  # 3^5 mappings at most per group


def _place(lay: Layout, branches: list[list[OpNode]], mapping: tuple[str, ...],
           before: dict[str, tuple], others: list, chains: list) -> None:
    whole = set()
    for b, role in zip(branches, mapping, strict=True):
        for n in b:
            lay.ops[n.op_id] = before[n.op_id] if role == "keep" else (role, None, None)
            if role != "keep":
                whole.add(n.op_id)
    lay.chains = others + [c for c in chains if not whole & set(c[0])]


# ---- EOP ------------------------------------------------------------------------------------
def _eop_dim(n: OpNode) -> str | None:
    return "H" if "H" in n.dims else ("OC" if "OC" in n.dims else None)


def eop_equal(nodes: list[OpNode], ev: Evaluator, opts: Any) -> Layout:
    """Every splittable op at GPU share 0.5 (H where it has rows, else OC)."""
    lay = Layout()
    for n in nodes:
        dim = _eop_dim(n)
        ok = dim is not None and ev.unit([n], dim, 0.5) is not None
        lay.ops[n.op_id] = ("split", dim, 0.5) if ok else ("gpu", None, None)
    return lay


def key_ops(ev: Evaluator, nodes: list[OpNode]) -> set[str]:
    """The fewest ops whose best single-processor times add up to 95% of the total."""
    t = {n.op_id: min(ev.whole(n, "cpu"), ev.whole(n, "gpu")) for n in nodes}
    total, acc, keys = sum(t.values()), 0.0, set()
    for op_id in sorted(t, key=t.get, reverse=True):
        if acc >= KEY_SHARE * total:
            break
        keys.add(op_id)
        acc += t[op_id]
    return keys


def _subgraphs(nodes: list[OpNode]) -> list[list[OpNode]]:
    runs: list[list[OpNode]] = []
    for i, n in enumerate(nodes):
        if i and nodes[i - 1].chain_next.get("H"):
            runs[-1].append(n)
        else:
            runs.append([n])
    return runs


def _snap(ratio: float, step: float) -> float:
    return round(min(max(round(ratio / step) * step, step), 1 - step), 6)


def eop_fixed(nodes: list[OpNode], ev: Evaluator, opts: Any) -> Layout:
    """Key ops split at one ratio per subgraph (a run of single-reader ops): the GPU share that
    makes both processors finish together, from the subgraph's CPU and GPU times."""
    keys = key_ops(ev, nodes)
    lay = Layout({n.op_id: _faster(ev, n) for n in nodes})
    for run in _subgraphs(nodes):
        mine = [n for n in run if n.op_id in keys and _eop_dim(n)]
        if not mine:
            continue
        cpu = sum(ev.whole(n, "cpu") for n in mine)
        gpu = sum(ev.whole(n, "gpu") for n in mine)
        ratio = _snap(cpu / (cpu + gpu), opts.step)
        for n in mine:
            dims = [d for d in n.dims if ev.unit([n], d, ratio) is not None]
            if dims:
                d = min(dims, key=lambda d: ev.unit([n], d, ratio).total_us)
                lay.ops[n.op_id] = ("split", d, ratio)
    return lay


def eop_tuned(nodes: list[OpNode], ev: Evaluator, opts: Any, span: int = 6) -> Layout:
    """eop-fixed, then Algorithm 2: for each pair of adjacent key ops, move one's ratio up
    and the other's down by up to ``span`` grid steps while the plan estimate improves."""
    lay = eop_fixed(nodes, ev, opts)
    split = [n for n in nodes if lay.place(n.op_id)[0] == "split"]
    best = layout_cost(ev, nodes, lay)
    for a, b in zip(split, split[1:]):
        pa, pb = lay.place(a.op_id), lay.place(b.op_id)
        for k in range(-span, span + 1):
            ra, rb = _snap(pa[2] + k * opts.step, opts.step), _snap(pb[2] - k * opts.step,
                                                                    opts.step)
            if ev.unit([a], pa[1], ra) is None or ev.unit([b], pb[1], rb) is None:
                continue
            old = lay.ops[a.op_id], lay.ops[b.op_id]
            lay.ops[a.op_id], lay.ops[b.op_id] = (("split", pa[1], ra), ("split", pb[1], rb))
            cost = layout_cost(ev, nodes, lay)
            if cost < best - 1e-9:
                best = cost
            else:
                lay.ops[a.op_id], lay.ops[b.op_id] = old
    return lay
