"""Planning strategies: each turns a model's ops and a cost source into a :class:`Layout`.

``STRATEGIES`` maps the names the CLI and the bench use to :class:`Strategy` records.
Everything here is plain python over :class:`OpNode` records (no TVM import).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .baselines import distribute_branches, eop_equal, eop_fixed, eop_tuned, mulayer
from .memory import capped_bytes
from .nodes import OpNode
from .search import (
    DEFAULT_DELTA,
    DEFAULT_STEP,
    Evaluator,
    Layout,
    chain_search,
    improve_placements,
    layout_cost,
    layout_of,
    per_op_choices,
)


@dataclass
class Options:
    """Knobs of the search (defaults: CoDL's)."""

    step: float = DEFAULT_STEP  # ratio grid
    delta: float = DEFAULT_DELTA  # Algorithm 1's range around the head's ratio
    min_gain: float = 0.0  # a split must beat the faster processor by this fraction
    # a plan must beat the better single processor by this fraction of its estimate, else that
    # processor runs the model: on the H100 the estimated ratio of such plans to the best
    # single processor was off by ~5% on average (BENCH.md), and a gain predicted
    # below 2% is a coin toss that costs a copy and a sync when it lands wrong (tiny-cnn lost
    # 3% that way); wider margins would drop real gains (ResNet-18's estimate was once 2.9%)
    min_plan_gain: float = 0.02
    # most memory vs the GPU-only plan, of the memory the roles share (cap_memory; None: no
    # cap); CoDL measured 26% more than a one-processor engine on its phone (1.41x on VGG)
    memory_cap: float | None = 1.3
    # parallel branches whole on both processors at once (codl; muLayer always does)
    branches: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def single(place: str) -> Callable[[list[OpNode], Evaluator, Options], Layout]:
    def plan(nodes: list[OpNode], ev: Evaluator, opts: Options) -> Layout:
        return Layout({n.op_id: (place, None, None) for n in nodes}, io=place)

    return plan


def layer_to_processor(nodes: list[OpNode], ev: Evaluator, opts: Options) -> Layout:
    """Each op whole on one processor: start from each op's faster one, then flip ops while
    the plan estimate (copies included) improves."""
    lay = Layout({n.op_id: (min(("gpu", "cpu"), key=lambda r: ev.isolated(n, r)), None, None)
                  for n in nodes})
    return improve_placements(ev, nodes, lay)


def codl(nodes: list[OpNode], ev: Evaluator, opts: Options) -> Layout:
    """CoDL: hybrid-dimension per-op plans, Algorithm 1 chains, whole ops on their better
    processor, parallel branches whole on both processors at once where that wins
    (muLayer's branch distribution); never worse (by the estimate) than the better single
    processor."""
    choices = per_op_choices(ev, nodes, opts.step, opts.min_gain)
    chains = chain_search(ev, nodes, choices, opts.delta, opts.step)
    lay = improve_placements(ev, nodes, layout_of(choices, chains))
    if opts.branches:
        lay = distribute_branches(ev, nodes, lay, keep=True)
    if opts.memory_cap is not None:
        lay = cap_memory(ev, nodes, lay, choices, opts.memory_cap)
    return never_worse(ev, nodes, lay, opts.min_plan_gain)


ORACLE_STEP = 0.25  # the shares the oracle measures (planner.api.MEASURE_GRID)


def oracle(nodes: list[OpNode], ev: Evaluator, opts: Options) -> Layout:
    """CoDL's search restricted to the ratios whose parts were measured on the target.

    Between measured shares the costs would be interpolated, and at 0.05-0.1 CPU shares
    extrapolated; plans chosen there lost up to 2.9x on the H100.
    """
    return codl(nodes, ev, replace(opts, step=max(opts.step, ORACLE_STEP)))


def never_worse(ev: Evaluator, nodes: list[OpNode], lay: Layout,
                min_plan_gain: float = 0.0) -> Layout:
    """``lay`` if its estimate beats the better single processor's by ``min_plan_gain``
    (a fraction), else that single-processor plan.

    Where the two roles compute on the same cores (``costs.concurrent`` false: the
    cpu-pair), always the single-processor plan: a split's parts and a switch between roles
    run on the cores one role has alone, so any gain the estimate shows comes from the noise
    of the samples (ResNet-18 on the cpu-pair: a plan of OC splits predicted 7% faster than
    CPU-only ran 1.37x as long, its parts' thread pools contending for the same two cores).
    """
    singles = [single(p)(nodes, ev, Options()) for p in ("gpu", "cpu")]
    best = min(singles, key=lambda s: layout_cost(ev, nodes, s))
    if not ev.costs.concurrent:
        best.notes.append(f"the roles share cores: {best.io.upper()}-only runs")
        return best
    limit = layout_cost(ev, nodes, best) * (1.0 - min_plan_gain)
    if layout_cost(ev, nodes, lay) < limit:
        return lay
    best.notes += [*lay.notes, f"no plan with splits beats {best.io.upper()}-only by "
                               f"{min_plan_gain:.0%} by the estimate: {best.io.upper()}-only runs"]
    return best


def cap_memory(ev: Evaluator, nodes: list[OpNode], lay: Layout, choices: dict,
               cap: float) -> Layout:
    """Turn H splits (full weights on both sides) of the heaviest ops into OC splits or whole
    placements until the plan's memory is within ``cap`` x the GPU-only plan's, and say so
    in ``lay.notes``.

    The memory counted is the one the roles share (:func:`~.memory.capped_bytes`): both
    roles' bytes on a phone or a Jetson, the GPU's alone where it has memory of its own
    (``costs.shared_memory`` false: an H split then never grows it, and PoseNet's 7x7 convs
    stay split instead of costing 11% of its predicted gain at 8 SMs).
    """
    shared = ev.costs.shared_memory
    limit = cap * capped_bytes(nodes, single("gpu")(nodes, ev, Options()), shared)
    heavy = sorted((n for n in nodes if lay.place(n.op_id)[1] == "H"),
                   key=lambda n: -n.weight_bytes)
    moved = []
    for n in heavy:
        if capped_bytes(nodes, lay, shared) <= limit:
            break
        moved.append(n.op_id)
        for c in [c for c in lay.chains if n.op_id in c[0]]:
            lay.chains.remove(c)
            for op in c[0]:
                ch = choices[op]
                lay.ops[op] = (ch.place, ch.dim, ch.ratio)
        best = ("gpu", None, None)
        for ratio in (0.25, 0.5, 0.75):
            u = ev.unit([n], "OC", ratio) if "OC" in n.dims else None
            if u is not None and u.total_us < ev.whole(n, "gpu"):
                best = ("split", "OC", ratio)
        lay.ops[n.op_id] = best
    if moved:
        what = "both processors'" if shared else "the GPU's"
        lay.notes.append(f"memory cap: {len(moved)} H split(s) ({', '.join(moved)}) made OC "
                         f"splits or whole ops to keep {what} memory within {cap:g}x the "
                         "GPU-only plan's")
    return lay


@dataclass(frozen=True)
class Strategy:
    fn: Callable[[list[OpNode], Evaluator, Options], Layout]
    help: str
    measured: bool = False  # needs measured costs (the oracle)


STRATEGIES: dict[str, Strategy] = {
    "cpu-only": Strategy(single("cpu"), "every op on the CPU"),
    "gpu-only": Strategy(single("gpu"), "every op on the GPU"),
    "layer-to-processor": Strategy(layer_to_processor, "best single processor per op"),
    "mulayer": Strategy(mulayer, "muLayer: OC split at 0.25/0.5/0.75 + branch distribution"),
    "eop-equal": Strategy(eop_equal, "EOP baseline: every op split at 0.5"),
    "eop-fixed": Strategy(eop_fixed, "EOP: key ops, one ratio per subgraph from its speedup"),
    "eop": Strategy(eop_tuned, "EOP: key ops + collaborative tuning of adjacent ratios"),
    "codl": Strategy(codl, "CoDL: hybrid-dimension split + operator chains (Algorithm 1)"),
    "oracle": Strategy(oracle, "CoDL's search on costs measured on the target (measured "
                               "ratios only)", measured=True),
}
