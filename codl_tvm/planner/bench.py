"""End-to-end benchmark of plans on one model, here (``codl-tvm bench``)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import tvm

from ..device import DevicePair
from .api import PlanResult, make_plan
from .costs import CostSource
from .opgraph import ModelGraph, build_graph
from .search import Evaluator
from .strategies import STRATEGIES, Options
from .timing import calibrated_ideal_us, interleaved, representatives, same_as, summarize

DEFAULT_PLANS = tuple(STRATEGIES)


def plan_all(mg: ModelGraph, names: list[str], costs: CostSource | None,
             oracle_costs: CostSource | None = None, options: Options | None = None
             ) -> dict[str, PlanResult]:
    out = {}
    for name in names:
        src = oracle_costs if STRATEGIES[name].measured else costs
        if src is None and name not in ("cpu-only", "gpu-only"):
            need = "measured costs" if STRATEGIES[name].measured else "predictor"
            print(f"skipping {name}: no {need}", file=sys.stderr)
            continue
        out[name] = make_plan(mg, name, src, options)
    return out


def memory_row(res: PlanResult) -> dict[str, float]:
    return {"cpu_mem_mb": res.memory["cpu_bytes"] / 2**20,
            "gpu_mem_mb": res.memory["gpu_bytes"] / 2**20}


def bench(
    mod: tvm.IRModule,
    pair: DevicePair,
    names: list[str],
    costs: CostSource | None,
    oracle_costs: CostSource | None = None,
    rounds: int = 10,
    check: bool = True,
    session: Any = None,
) -> list[dict[str, Any]]:
    """Compile every plan, time them interleaved in one process, and compare with the
    unsplit (GPU-only) output; returns the bench rows. With ``session`` (a ``tvm.rpc``
    session, see :func:`codl_tvm.deploy.rpc.connect`) every plan is uploaded and run there."""
    from .. import compile as codl_compile

    mg = build_graph(mod)
    results = plan_all(mg, names, costs, oracle_costs)
    reps = representatives({n: plan_key(r.plan) for n, r in results.items()})
    exes = {n: codl_compile(mod, pair, r.plan) for n, r in results.items() if reps[n] == n}
    ref = codl_compile(mod, pair, None)
    if session is not None:
        with tempfile.TemporaryDirectory(prefix="codl-bench-") as tmp:
            exes = {n: _remote(session, e, Path(tmp, n)) for n, e in exes.items()}
            ref = _remote(session, ref, Path(tmp, "unsplit"))
    inputs = ref.random_inputs(0)
    expected = ref.run(inputs)
    unique = list(exes)
    timed = interleaved([exes[n] for n in unique], [inputs] * len(unique), rounds=rounds)
    order = list(reps)
    times = [timed[unique.index(reps[n])] for n in order]
    extra = {n: memory_row(results[n]) | same_as(reps).get(n, {}) for n in order}
    if check:
        errs = {n: max(_rel_err(g, e) for g, e in zip(exes[n].run(inputs), expected))
                for n in unique}
        for n in order:
            extra[n]["max_rel_err"] = errs[reps[n]]
    ideal = None
    src = oracle_costs or costs
    lat = {n: float(np.median(t)) * 1e6 for n, t in zip(order, times)}
    if src is not None and "cpu-only" in lat and "gpu-only" in lat:
        ev = Evaluator(src, mg.nodes)
        per_op = [(ev.whole(x, "cpu"), ev.whole(x, "gpu")) for x in mg.nodes]
        ideal = calibrated_ideal_us(per_op, lat["cpu-only"], lat["gpu-only"])
    return summarize(order, times, {n: r.predicted_us for n, r in results.items()}, ideal, extra)


def plan_key(plan: Any) -> str:
    """A plan's content (placements, chains, io device, candidates) as a comparable string;
    its notes, which say why it was made so, are not content."""
    import json

    doc = plan.to_json()
    for part in (doc, *doc.get("candidates", {}).values()):
        part.pop("notes", None)
    return json.dumps(doc, sort_keys=True)


def _remote(session: Any, exe: Any, path: Path) -> Any:
    from ..deploy import rpc

    return rpc.load_remote(session, exe.export(path))


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    denom = max(float(np.abs(want).max()), 1e-30)
    return float(np.abs(got.astype(np.float64) - want).max() / denom)

