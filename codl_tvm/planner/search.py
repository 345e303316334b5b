"""The planner's search: unit costs (CoDL Eq. 2), per-op hybrid-dimension plans (section 4.1),
the chain search (Algorithm 1) and a whole-plan latency estimate. No TVM import.

A *unit* is one op or a chain of ops sharing one split (dim, GPU share ``ratio`` of the last
op's output rows, or of the head's channel units). Each processor runs its sub-ops back to
back, and the GPU launches before the CPU computes, so a unit costs
``share_us + max(sum of CPU sub-ops, sum of GPU sub-ops)``; data is shared only at the unit's
ends. Where copies overlap kernels (CUDA), the copies count on the CPU's side instead
(:class:`UnitCost`). Row parts grow backwards through the chain by each op's window (Eq. 1),
exactly as :func:`codl_tvm.unit_geometry.h_parts` cuts them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from ..predictor.opspec import OpSpec
from ..predictor.split_sharing import (
    SplitSharing,
    SplitUnit,
    chunked_cpu,
    spec_parts,
)
from .branches import overlap_us
from .cost_source import CostSource, as_source
from .glue import GlueOp
from .nodes import OpNode, footprint_bytes

ROLES = ("gpu", "cpu")
DEFAULT_STEP = 0.05
DEFAULT_DELTA = 0.3


@dataclass(frozen=True)
class UnitCost:
    """A unit's kernel time per role and its sharing.

    ``share_us`` is all of the sharing, priced by the costs'
    :meth:`~codl_tvm.planner.cost_source.CostSourceBase.split_sharing` (as ``explain``'s
    timeline prices it; :meth:`of`). Where copies overlap kernels (``overlap``: the
    runtime's :class:`~codl_tvm.passes.OverlapCopies`), only the CPU's slice (``lead_us``)
    comes before both parts; the GPU's slice (``gpu_side_us``) runs on the GPU's side, the
    copies to and from the CPU (``cpu_side_us``) on the CPU's, and the concat
    (``join_us``) after both. Where rows move by 2-D copies (``block_copies``) there is no
    CPU's slice and no concat: the GPU's rows and its part's copy into the output are copies
    within the GPU, on its side.
    """

    cpu_us: float
    gpu_us: float
    share_us: float
    concurrent: bool = True  # False: the roles share cores, the parts run one after another
    overlap: bool = False
    lead_us: float = 0.0
    cpu_side_us: float = 0.0
    gpu_side_us: float = 0.0
    join_us: float = 0.0

    @staticmethod
    def of(cpu_us: float, gpu_us: float, sharing: SplitSharing, concurrent: bool = True,
           overlap: bool = False) -> UnitCost:
        """A unit's cost from its kernel times and its priced sharing
        (:meth:`~codl_tvm.planner.cost_source.CostSourceBase.split_sharing`)."""
        copies, gpu_side = sharing.cpu_side_us, sharing.gpu_side_us
        return UnitCost(cpu_us, gpu_us, sharing.lead_us + gpu_side + copies + sharing.join_us,
                        concurrent, overlap, sharing.lead_us, copies, gpu_side, sharing.join_us)

    @property
    def total_us(self) -> float:
        if not self.concurrent:
            return self.share_us + self.cpu_us + self.gpu_us
        if self.overlap:
            return self.lead_us + self.join_us + max(self.cpu_us + self.cpu_side_us,
                                                     self.gpu_us + self.gpu_side_us)
        return self.share_us + max(self.cpu_us, self.gpu_us)


@dataclass
class Choice:
    """One op's plan without chains: where it runs and what that costs in isolation."""

    place: str  # "gpu", "cpu" or "split"
    dim: str | None
    ratio: float | None
    total_us: float
    split: tuple[str, float, float] | None = None  # best split (dim, ratio, total_us) seen


@dataclass
class Layout:
    """A plan as plain data: ``ops[id] = (place, dim, ratio)``; ``chains = [(ids, dim, ratio)]``."""

    ops: dict[str, tuple[str, str | None, float | None]] = field(default_factory=dict)
    chains: list[tuple[list[str], str, float]] = field(default_factory=list)
    io: str = "gpu"  # where the model's inputs and outputs live
    notes: list[str] = field(default_factory=list)  # why the strategy changed its plan

    def place(self, op_id: str) -> tuple[str, str | None, float | None]:
        return self.ops.get(op_id, ("gpu", None, None))


def ratio_grid(step: float = DEFAULT_STEP, lo: float = 0.0, hi: float = 1.0) -> list[float]:
    """GPU shares strictly inside (0, 1) on a ``step`` grid, clipped to [lo, hi]."""
    n = round(1 / step)
    return [round(i * step, 6) for i in range(1, n) if lo - 1e-9 <= i * step <= hi + 1e-9]


def unit_parts(nodes: list[OpNode], dim: str, ratio: float) -> dict[str, list[OpSpec]] | None:
    """Per role, the sub-op of every member; None when one side gets nothing or cannot work."""
    if any(n.spec is None or dim not in n.dims for n in nodes):
        return None
    return spec_parts([n.spec for n in nodes], dim, ratio)


class Evaluator:
    """Costs of units and whole placements from one :class:`CostSource`, memoised."""

    def __init__(self, costs: CostSource, nodes: list[OpNode] | None = None,
                 glue: Sequence[GlueOp] = ()) -> None:
        # a model's own footprint decides which cached weights stay in the GPU's L2
        self.costs = as_source(costs)
        if nodes is not None:
            self.costs = self.costs.in_model(footprint_bytes(nodes))
        self.glue = list(glue)
        self._kernels: dict[tuple[str, OpSpec], float] = {}
        self._units: dict[tuple, UnitCost | None] = {}
        self._glue: dict[tuple[str, OpSpec], float] = {}

    def glue_us(self, op: GlueOp, role: str) -> float:
        """One op outside the plan on ``role`` (0 where the costs cannot price it: measured
        costs of the planned ops only)."""
        key = (role, op.spec())
        if key not in self._glue:
            try:
                with warnings.catch_warnings():  # a norm's or a logit's shape is no conv's
                    warnings.simplefilter("ignore")
                    self._glue[key] = self.kernel(*key)
            except KeyError:
                self._glue[key] = 0.0
        return self._glue[key]

    def kernel(self, role: str, sub: OpSpec, transposed: bool = False) -> float:
        """``sub`` on ``role``; ``transposed``: a conv2d_transpose's (part), ``sub`` being the
        conv over its dilated input, on the kernel the dispatch runs a transposed conv with."""
        key = (role, sub, transposed)
        if key not in self._kernels:
            self._kernels[key] = (self.costs.transposed_conv_us(role, sub) if transposed
                                  else self.costs.kernel_us(role, sub))
        return self._kernels[key]

    def share(self, op: str, role: str, nbytes: float) -> float:
        return self.costs.sharing_us(op, role, nbytes)

    def whole(self, node: OpNode, role: str) -> float:
        """Kernel time of the whole op on ``role`` (0 for an op without a spec)."""
        if node.spec is None:
            return 0.0
        return self.kernel(role, node.spec, node.transposed) * node.repeat

    def isolated(self, node: OpNode, role: str) -> float:
        """Whole op on ``role`` with its input and output brought from and to the GPU."""
        if role == "gpu" or node.spec is None:
            return self.whole(node, "gpu")
        return (self.whole(node, "cpu") + self.share("to_cpu", "cpu", node.in_bytes)
                + self.share("to_gpu", "gpu", node.out_bytes))

    def unit(self, nodes: list[OpNode], dim: str, ratio: float) -> UnitCost | None:
        """Cost of ``nodes`` split together (sharing at the ends only); None if impossible."""
        key = (tuple(n.op_id for n in nodes), dim, ratio)
        if key not in self._units:
            self._units[key] = self._unit(nodes, dim, ratio)
        return self._units[key]

    def _unit(self, nodes: list[OpNode], dim: str, ratio: float) -> UnitCost | None:
        parts = unit_parts(nodes, dim, ratio)
        if parts is None:
            return None
        rep = nodes[0].repeat
        try:
            t = {r: sum(self.kernel(r, s, n.transposed) for n, s in zip(nodes, parts[r]))
                 * rep for r in ROLES}
        except KeyError:  # measured costs without this part: the split is not an option
            return None
        last = nodes[-1]
        unit = SplitUnit(nodes[0].spec, last.spec, dim, ratio, parts, rep, last.out_bytes)
        sharing = self.costs.split_sharing(unit)
        if dim == "H" and self.costs.overlap and self.costs.cpu_chunks > 1:
            kernels = [partial(self.kernel, transposed=n.transposed) for n in nodes]
            chunked = chunked_cpu(parts["cpu"], rep, self.costs.cpu_chunks, kernels,
                                  self.share, sharing)
            if chunked is not None:
                t["cpu"], sharing = sum(chunked[0]), chunked[1]
        return UnitCost.of(t["cpu"], t["gpu"], sharing, self.costs.concurrent,
                           self.costs.overlap)


# ---- section 4.1: per-op plans --------------------------------------------------------------
def best_choice(ev: Evaluator, node: OpNode, grid: list[float], min_gain: float = 0.0) -> Choice:
    """The op's best (dim, ratio) by Eq. 2, unless it does not beat the faster processor.

    ``min_gain`` (fraction): a split must be that much faster than running whole, so ops
    whose gain is within the predictor's error stay unsplit. Ops whose shape lies outside
    what the cost source was trained on are never split: their split times would be
    extrapolations (fast-style-transfer's 480x640 output layer lost 2.4% on the H100 that way).
    """
    whole = {r: ev.isolated(node, r) for r in ROLES}
    role = min(whole, key=whole.get)
    best: tuple[str, float, float] | None = None
    splittable = node.spec is not None and ev.costs.in_range(node.spec)
    for dim in node.dims if splittable else ():
        for ratio in grid:
            u = ev.unit([node], dim, ratio)
            if u is not None and (best is None or u.total_us < best[2]):
                best = (dim, ratio, u.total_us)
    if best is not None and best[2] < whole[role] * (1.0 - min_gain):
        return Choice("split", best[0], best[1], best[2], best)
    return Choice(role, None, None, whole[role], best)


def per_op_choices(ev: Evaluator, nodes: list[OpNode], step: float = DEFAULT_STEP,
                   min_gain: float = 0.0) -> dict[str, Choice]:
    grid = ratio_grid(step)
    return {n.op_id: best_choice(ev, n, grid, min_gain) for n in nodes}


# ---- section 4.2: Algorithm 1 ---------------------------------------------------------------
def chain_search(
    ev: Evaluator,
    nodes: list[OpNode],
    choices: dict[str, Choice],
    delta: float = DEFAULT_DELTA,
    step: float = DEFAULT_STEP,
    max_len: int = 64,
) -> list[tuple[list[str], str, float, float]]:
    """CoDL Algorithm 1: greedy chains ``(op ids, dim, ratio, gain_us)`` in data-flow order.

    From a head not yet chained, for each ratio within ``delta`` of the head's best ratio, ops
    are appended while each next op reads only the previous one's output (never across a
    join or a branch) and the chain still gains over the ops' own plans; halos are recomputed
    for every member at each length. The best (ratio, length) seen is kept.
    """
    chains: list[tuple[list[str], str, float, float]] = []
    i = 0
    while i < len(nodes):
        head = choices[nodes[i].op_id]
        best: tuple[int, str, float, float] | None = None  # (end, dim, ratio, gain)
        if head.split is not None:
            dim, rho_head, _ = head.split
            for rho in ratio_grid(step, rho_head - delta, rho_head + delta):
                members = [nodes[i]]
                no_chain = head.total_us
                j = i
                while (j + 1 < len(nodes) and len(members) < max_len
                       and nodes[j].chain_next.get(dim)):
                    nxt = nodes[j + 1]
                    members.append(nxt)
                    no_chain += choices[nxt.op_id].total_us
                    u = ev.unit(members, dim, rho)
                    if u is None:
                        break
                    gain = no_chain - u.total_us
                    if gain > (best[3] if best else 0.0):
                        best = (j + 1, dim, rho, gain)
                    if gain < 0:
                        break
                    j += 1
        if best is None:
            i += 1
            continue
        end, dim, rho, gain = best
        chains.append(([n.op_id for n in nodes[i:end + 1]], dim, rho, gain))
        i = end + 1
    return chains


def layout_of(choices: dict[str, Choice], chains=()) -> Layout:
    lay = Layout({k: (c.place, c.dim, c.ratio) for k, c in choices.items()})
    for ids, dim, rho, *_ in chains:
        lay.chains.append((list(ids), dim, rho))
        for op_id in ids:
            lay.ops[op_id] = ("split", dim, rho)
    return lay


# ---- whole-plan estimate --------------------------------------------------------------------
def layout_cost(ev: Evaluator, nodes: list[OpNode], lay: Layout) -> float:
    """Estimated latency (us) of ``lay``: units in order plus copies where devices change,
    plus the ops outside the plan (``ev.glue``) on the device of the op they follow, where
    they run a kernel of their own (:meth:`GlueOp.fused`).

    Values are copied once per device (as the partition pass does); the model's inputs and
    outputs live on ``lay.io``. Parallel branches placed whole on both processors run at
    once (:func:`~.branches.overlap_us`).
    """
    chain_of = {op: c for c in lay.chains for op in c[0]}
    by_id = {n.op_id: n for n in nodes}
    has_succ = {p for n in nodes for p in n.preds}
    loc: dict[str, str] = {}
    copied: set[tuple[str, str]] = set()
    split_ops: set[str] = set()
    total = 0.0
    for node in nodes:
        chain = chain_of.get(node.op_id)
        if chain is not None and chain[0][0] != node.op_id:
            continue  # counted with its chain
        members = [by_id[i] for i in chain[0]] if chain else [node]
        place, dim, ratio = ("split", chain[1], chain[2]) if chain else lay.place(node.op_id)
        unit = ev.unit(members, dim, ratio) if place == "split" else None
        if place == "split" and unit is None:
            place = "gpu"  # the pass runs an unsplittable unit on the GPU
        need = "cpu" if place == "cpu" else "gpu"
        for p in node.preds:
            if loc.get(p, lay.io) != need and (p, need) not in copied:
                copied.add((p, need))
                total += ev.share(f"to_{need}", need, by_id[p].out_bytes)
        if not node.preds and need != lay.io:
            total += ev.share(f"to_{need}", need, node.in_bytes)
        if unit is not None:
            total += unit.total_us
            split_ops.update(m.op_id for m in members)
        else:
            total += sum(ev.whole(m, place) for m in members)
        for m in members:
            loc[m.op_id] = need
    for node in nodes:
        if node.op_id not in has_succ and loc.get(node.op_id, lay.io) != lay.io:
            total += ev.share(f"to_{lay.io}", lay.io, node.out_bytes)
    glue = sum(ev.glue_us(g, loc.get(g.source, lay.io)) for g in ev.glue
               if not g.fused(split_ops))
    return total + glue - overlap_us(ev, nodes, lay)


def ideal_us(ev: Evaluator, nodes: list[OpNode]) -> float:
    """Sum over ops of 1 / (1/T_cpu + 1/T_gpu): perfect sharing, no overhead (the faster
    role alone where the roles share cores)."""
    total = 0.0
    together = ev.costs.concurrent
    for n in nodes:
        c, g = ev.whole(n, "cpu"), ev.whole(n, "gpu")
        if c > 0 and g > 0:
            total += c * g / (c + g) if together else min(c, g)
        else:
            total += max(c, g)
    return total


def improve_placements(ev: Evaluator, nodes: list[OpNode], lay: Layout,
                       sweeps: int = 3) -> Layout:
    """Flip whole ops between the CPU and the GPU while the plan estimate improves."""
    best = layout_cost(ev, nodes, lay)
    chained = {op for c in lay.chains for op in c[0]}
    for _ in range(sweeps):
        changed = False
        for node in nodes:
            cur = lay.place(node.op_id)
            if node.op_id in chained or cur[0] == "split" or node.spec is None:
                continue
            lay.ops[node.op_id] = ("cpu" if cur[0] == "gpu" else "gpu", None, None)
            cost = layout_cost(ev, nodes, lay)
            if cost < best - 1e-9:
                best, changed = cost, True
            else:
                lay.ops[node.op_id] = cur
        if not changed:
            break
    return lay
