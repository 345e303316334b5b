"""Planning a Relax model: cost sources, strategies -> :class:`codl_tvm.Plan`."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tvm

from ..device import DevicePair
from ..geometry import check_cpu_chunks
from ..plan import Chain, OpPlacement, Plan
from .costs import (
    BlockCopyCosts,
    CostSource,
    MeasuredCosts,
    OverlappedCosts,
    PairCosts,
    PredictorCosts,
    SerialCosts,
)
from .memory import layout_memory
from .opgraph import ModelGraph, build_graph
from .search import Evaluator, Layout, ideal_us, layout_cost
from .strategies import STRATEGIES, Options

# coarse shares for measured costs: each processor's share of every op on every dim
MEASURE_GRID = (0.25, 0.5, 0.75, 1.0)


@dataclass
class PlanResult:
    """A plan and what the planner expects of it."""

    name: str
    plan: Plan
    layout: Layout
    predicted_us: float
    memory: dict[str, int]


def to_plan(lay: Layout, mg: ModelGraph) -> Plan:
    plan = Plan(fingerprint=mg.fingerprint, num_ops=len(mg.nodes), io_device=lay.io)
    for n in mg.nodes:
        place, dim, ratio = lay.place(n.op_id)
        plan.ops[n.op_id] = (OpPlacement("split", dim, float(ratio)) if place == "split"
                             else OpPlacement(place))
    plan.chains = [Chain(list(ids), dim, float(r)) for ids, dim, r in lay.chains]
    plan.notes = list(lay.notes)
    return plan


def from_plan(plan: Plan) -> Layout:
    lay = Layout({k: (p.place, p.dim, p.ratio) for k, p in plan.ops.items()}, io=plan.io_device)
    lay.chains = [(list(c.ops), c.dim, c.ratio) for c in plan.chains]
    for ids, dim, r in lay.chains:
        for op in ids:
            lay.ops[op] = ("split", dim, r)
    return lay


def make_plan(
    mod: tvm.IRModule | ModelGraph,
    strategy: str = "codl",
    costs: CostSource | None = None,
    options: Options | None = None,
) -> PlanResult:
    """Plan ``mod`` with one strategy of :data:`STRATEGIES`.

    Parameters
    ----------
    mod : IRModule or ModelGraph
        The model (from :func:`codl_tvm.load_model`) or its graph.
    strategy : str
        A key of :data:`STRATEGIES` (``codl``, ``oracle``, ``mulayer``, ...).
    costs : CostSource
        Predictor-based or measured costs (``cpu-only``/``gpu-only`` work without).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    mg = mod if isinstance(mod, ModelGraph) else build_graph(mod)
    if costs is None:
        if strategy not in ("cpu-only", "gpu-only"):
            raise ValueError(f"strategy {strategy!r} needs a cost source (a predictor or "
                             "measured costs)")
        lay = STRATEGIES[strategy].fn(mg.nodes, None, options or Options())
        return PlanResult(strategy, to_plan(lay, mg), lay, float("nan"),
                          layout_memory(mg.nodes, lay))
    ev = Evaluator(costs, mg.nodes, mg.glue)
    lay = STRATEGIES[strategy].fn(mg.nodes, ev, options or Options())
    return PlanResult(strategy, to_plan(lay, mg), lay, layout_cost(ev, mg.nodes, lay),
                      layout_memory(mg.nodes, lay))


def estimate(mg: ModelGraph, plan: Plan, costs: CostSource) -> float:
    """Estimated latency (us) of any plan of ``mg``."""
    return layout_cost(Evaluator(costs, mg.nodes, mg.glue), mg.nodes, from_plan(plan))


def ideal(mg: ModelGraph, costs: CostSource) -> dict[str, float]:
    """``cpu_us``, ``gpu_us`` (whole model on one processor) and ``ideal_us`` (CoDL's bound:
    sum over ops of 1/(1/T_cpu + 1/T_gpu)) by ``costs``."""
    ev = Evaluator(costs, mg.nodes)
    return {"cpu_us": sum(ev.whole(n, "cpu") for n in mg.nodes),
            "gpu_us": sum(ev.whole(n, "gpu") for n in mg.nodes),
            "ideal_us": ideal_us(ev, mg.nodes)}


# ---- cost sources ---------------------------------------------------------------------------
def default_predictor(pair: str) -> Path | None:
    """The predictor codl-tvm ships for a device pair, if any."""
    from ..predictor import DATA_DIR

    path = DATA_DIR / f"predictor-{pair}.json"
    return path if path.is_file() else None


def predictor_costs(path: str | Path, pair: DevicePair | None = None) -> PredictorCosts:
    """Costs from a predictor file; with ``pair``, one warning where the predictor was made
    for another pair or machine (:meth:`~codl_tvm.predictor.BasePredictor.check_pair`)."""
    from ..predictor import load

    pred = load(path)
    return PredictorCosts(pred if pair is None else pred.check_pair(pair))


def measured_costs(
    mod: tvm.IRModule | ModelGraph,
    pair: DevicePair,
    cache: str | Path,
    grid: tuple[float, ...] = MEASURE_GRID,
    progress: bool = True,
    remote: dict[str, Any] | None = None,
    proto: Any = None,
) -> MeasuredCosts:
    """Measure every op of ``mod`` on ``pair`` (each processor's share of ``grid`` on each
    dim, plus the sharing costs) into the samples file ``cache`` (resumed when it exists).
    ``remote`` (``rpc``, ``tracker``, ``key``) measures on an RPC target instead of here;
    ``proto`` (:class:`codl_tvm.profiler.rounds.Protocol`) is how each sample is timed."""
    from ..profiler import profile, read_samples

    jobs = oracle_jobs(mod, grid)
    profile(pair, cache, jobs=jobs, progress=progress, proto=proto, **(remote or {}))
    return MeasuredCosts(read_samples(cache, pair=pair.name), label=f"measured ({cache})")


def oracle_jobs(mod: tvm.IRModule | ModelGraph, grid: tuple[float, ...] = MEASURE_GRID,
                model: str = "model") -> list[Any]:
    """Profiler jobs measuring every op of ``mod``: whole and split on each dim, the kernels
    between them whole (:mod:`.glue`: what they are priced as, so a plan's estimate on these
    measurements is a whole-model latency), and sharing."""
    from ..profiler import space

    mg = mod if isinstance(mod, ModelGraph) else build_graph(mod)
    specs = list({n.spec: (model, n.spec) for n in mg.nodes if n.spec is not None}.values())
    jobs = [j for j in space.compute_jobs(specs, grid) if j.dim in _dims_of(mg, j.spec)]
    # a ConvTranspose runs its own kernel, which no OpSpec job builds: left to the costs
    glue = list({g.spec(): (model, g.spec()) for g in mg.glue}.values())
    jobs += [j for j in space.compute_jobs(glue, (1.0,)) if j.dim == "H"]  # whole, each role
    return jobs + space.sharing_jobs(6, max(max(n.in_bytes, n.out_bytes) for n in mg.nodes))


def _dims_of(mg: ModelGraph, spec) -> set[str]:
    dims = {d for n in mg.nodes if n.spec == spec for d in n.dims}
    return dims or {"H", "OC"}


def resolve_costs(predictor: str | None, pair: DevicePair, mod: tvm.IRModule | None = None,
                  cache: str | Path | None = None,
                  remote: dict[str, Any] | None = None, block_copies: bool | None = None,
                  cpu_chunks: int | None = None) -> CostSource | None:
    """``--predictor`` as the CLI takes it: a file, ``measured``, or None for the default.

    The source is wrapped for the pair (:func:`for_pair`; ``block_copies``, ``cpu_chunks``:
    for plans built with those options; None: as the pair builds by default).
    """
    return for_pair(_resolve_costs(predictor, pair, mod, cache, remote), pair, block_copies,
                    cpu_chunks)


def for_pair(costs: CostSource | None, pair: DevicePair, block_copies: bool | None = None,
             cpu_chunks: int | None = None) -> CostSource | None:
    """``costs`` as ``pair`` runs splits: wrapped in :class:`SerialCosts` where its roles
    share the host's cores, in :class:`OverlappedCosts` where its copies overlap kernels,
    in :class:`BlockCopyCosts` where its row slices and joins are 2-D copies too (a CUDA
    pair by default; ``block_copies=False``: plans for ``compile(..., block_copies=False)``).
    ``cpu_chunks``: plans for ``compile(..., cpu_chunks=N)`` (None: the pair's default).
    Each carries whether the pair's roles share one memory (``shared_memory``; a pair with
    nothing else to say and memory of the GPU's own gets a :class:`PairCosts`)."""
    check_cpu_chunks(cpu_chunks)
    if costs is None:
        return None
    shared = pair.shares_memory
    if pair.is_cpu_only:
        return SerialCosts(costs, shared_memory=shared)
    if not pair.overlaps_copies:
        return costs if shared else PairCosts(costs, shared_memory=False)
    blocks = pair.runs_block_copies and block_copies is not False
    return (BlockCopyCosts if blocks else OverlappedCosts)(costs, cpu_chunks, shared)


def _resolve_costs(predictor: str | None, pair: DevicePair, mod: tvm.IRModule | None,
                   cache: str | Path | None, remote: dict[str, Any] | None) -> CostSource | None:
    if predictor == "measured":
        if mod is None or cache is None:
            raise ValueError("measured costs need the model and a cache file")
        return measured_costs(mod, pair, cache, remote=remote)
    if predictor:
        return predictor_costs(predictor, pair)
    path = default_predictor(pair.name)
    if path is not None:
        return predictor_costs(path, pair)
    if mod is not None and cache is not None:
        print(f"no predictor ships for pair {pair.name!r}: measuring every op here instead "
              f"(cached in {cache}); pass --predictor FILE to plan from a trained predictor",
              file=sys.stderr)
        return measured_costs(mod, pair, cache, remote=remote)
    return None
