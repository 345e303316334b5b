"""Offline bench bundles: plans compiled here, timed anywhere that has only the TVM runtime.

Build (full TVM, this machine)::

    codl-tvm bench MODEL --pair x86-cuda --arch sm_90 --bundle DIR

Run (the target; ``TVM_USE_RUNTIME_LIB=1`` works, only numpy and the TVM runtime are needed;
arguments: :func:`codl_tvm.commands.artifact.bundle_main`)::

    python -m codl_tvm.planner.bundle DIR -o results.json [--rounds 15] [--jobs 8]

``DIR/index.json`` holds, per model, every plan's prediction, memory estimate, content key
and ``same_as`` (identical plans are compiled and timed once), plus the per-op
(T_cpu, T_gpu) estimates for the ideal bound; ``DIR/MODEL/PLAN/`` is an exported artifact
(without weights: the runner draws random weights of the right shapes). Building more models
into one folder adds them to the index. The runner times each model's plans interleaved in one
process and writes the same rows as ``codl-tvm bench --json``, keyed by model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..outputs import write_json
from .timing import calibrated_ideal_us, format_rows, interleaved, same_as, summarize

INDEX = "index.json"


def build(out: str | Path, model: str, mod: Any, pair: Any, names: list[str], costs: Any,
          oracle_costs: Any = None, block_copies: bool | None = None,
          guard: bool = False, candidates: bool = False,
          cpu_scales: tuple[float, ...] | None = None, options: Any = None
          ) -> dict[str, Any]:
    """Plan ``mod`` with every strategy of ``names``, export each distinct plan under
    ``out/model/``, and record the model in ``out/index.json``; returns its index entry.
    ``block_copies``: passed to ``compile`` (price the plans so too). ``guard``: a plan that
    uses both processors refers to the bundle's ``cpu-only`` and ``gpu-only`` artifacts as
    its alternatives (``compile(..., guard=True)`` without building them twice; both must be
    among ``names``). ``candidates``: the ``codl`` plan also holds its candidates for other
    processor speeds (:mod:`codl_tvm.planner.candidates`; ``cpu_scales``: those speeds,
    default :data:`~codl_tvm.planner.candidates.CPU_SCALES`), built into its artifact where it
    is guarded. ``options``: the search's knobs (:class:`~codl_tvm.planner.strategies.Options`).

    Plans of the model built earlier into the same folder (for the same pair) and not named
    in ``names`` are kept, so a plan can be added or rebuilt on its own."""
    from .. import compile as codl_compile
    from ..executable import guard_plans
    from .bench import plan_all, plan_key
    from .candidates import CPU_SCALES, with_candidates
    from .opgraph import build_graph
    from .search import Evaluator

    out = Path(out)
    index_path = out / INDEX
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    mg = build_graph(mod)
    old = index.get(model, {})
    kept = {n: p for n, p in old.get("plans", {}).items()
            if n not in names and old.get("pair") == pair.name}
    entry: dict[str, Any] = {"pair": pair.name, "plans": dict(kept)}
    src = oracle_costs or costs
    if src is not None:
        ev = Evaluator(src, mg.nodes)
        entry["per_op_us"] = [[ev.whole(n, "cpu"), ev.whole(n, "gpu")] for n in mg.nodes]
        entry["per_op_source"] = src.label
    # plans kept from an earlier build of this model stay the representatives of their content
    reps: dict[str, str] = {p["key"]: n for n, p in kept.items() if "same_as" not in p}
    results = plan_all(mg, names, costs, oracle_costs, options)
    if candidates and "codl" in results:
        with_candidates(results["codl"], mg, costs, cpu_scales=cpu_scales or CPU_SCALES,
                        options=options)
    if guard:  # the single-processor plans first: the others refer to their artifacts
        if not {"gpu-only", "cpu-only"} <= results.keys():
            raise ValueError("a guarded bundle needs the gpu-only and cpu-only plans")
        results = {n: results[n] for n in ("gpu-only", "cpu-only")} | results
    for name, res in results.items():
        key = plan_key(res.plan)
        rep = reps.setdefault(key, name)
        if rep == name:
            # the bundle's own artifact of an earlier build of this plan is replaced
            exe = codl_compile(mod, pair, res.plan, block_copies=block_copies)
            if guard:  # the singles are the bundle's; candidates are built into the plan's
                exe.alternatives = {
                    alt: f"../{reps[plan_key(results[alt].plan)]}" if alt in results
                    else codl_compile(mod, pair, p, block_copies=block_copies)
                    for alt, p in guard_plans(mod, res.plan).items()}
            exe.export(out / model / name, weights=False, overwrite=True)
        res.plan.save(out / model / f"{name}.plan.json")
        entry["plans"][name] = {
            "predicted_ms": res.predicted_us / 1e3, "key": key,
            "cpu_mem_mb": res.memory["cpu_bytes"] / 2**20,
            "gpu_mem_mb": res.memory["gpu_bytes"] / 2**20,
        } | ({"same_as": rep} if rep != name else {})
    index[model] = entry
    write_json(index_path, index)
    return entry


def model_rows(root: Path, entry: dict[str, Any], rounds: int,
               deadline_s: float | None = None, adapt: bool = False) -> list[dict[str, Any]]:
    """Time one model's distinct plans interleaved; rows for every plan name. ``adapt``: a
    guarded plan keeps choosing (:mod:`codl_tvm.adaptive_guard`; its row's ``adaptive`` says
    what it ran)."""
    from .. import runtime

    plans = entry["plans"]
    reps = {n: p.get("same_as", n) for n, p in plans.items()}
    unique = [n for n in reps if reps[n] == n]
    # a guarded plan: the fastest of its alternatives
    runners = [runtime.load(root / n, adapt=adapt) for n in unique]
    inputs = [r.random_inputs(0) for r in runners]
    timed = interleaved(runners, inputs, rounds=rounds, deadline_s=deadline_s)
    names = list(reps)
    times = [timed[unique.index(reps[n])] for n in names]
    lat = {n: sorted(t)[len(t) // 2] * 1e6 for n, t in zip(names, times)}
    ideal = None
    if entry.get("per_op_us") and "cpu-only" in lat and "gpu-only" in lat:
        ideal = calibrated_ideal_us(entry["per_op_us"], lat["cpu-only"], lat["gpu-only"])
    pred = {n: plans[n]["predicted_ms"] * 1e3 for n in names}
    guards = {n: r.choice | ({"adaptive": r.chooser.summary()} if hasattr(r, "chooser") else {})
              for n, r in zip(unique, runners) if r.choice is not None}
    extra = {n: {k: v for k, v in plans[n].items() if k.endswith("_mb")}
             | same_as(reps).get(n, {}) | ({"guard": guards[reps[n]]} if reps[n] in guards
                                            else {}) for n in names}
    return summarize(names, times, pred, ideal, extra)


def run(root: str | Path, output: str | Path, rounds: int = 15, deadline_s: float = 1e9,
        jobs: int = 1, models: list[str] | None = None, adapt: bool = False
        ) -> dict[str, list[dict[str, Any]]]:
    """Time every model of the bundle at ``root``; rows are written to ``output`` after each
    model (so a run cut short keeps what it measured)."""
    root = Path(root)
    if not (root / INDEX).is_file():
        raise FileNotFoundError(f"{root}: not a bench bundle (no {INDEX})")
    index = json.loads((root / INDEX).read_text())
    os.environ.setdefault("CODL_CUDA_CACHE", str(Path.home() / ".cache" / "codl-tvm-nvcc"))
    if jobs > 1:
        _warm(root, index, jobs)
    results: dict[str, list[dict[str, Any]]] = {}
    start = time.perf_counter()
    for model in models or list(index):
        left = deadline_s - (time.perf_counter() - start)
        if left < 5:
            print(f"{model}: skipped, deadline reached", flush=True)
            continue
        rows = model_rows(root / model, index[model], rounds, deadline_s=left, adapt=adapt)
        results[model] = rows
        print(f"\n== {model}\n{format_rows(rows)}", flush=True)
        _write_json(Path(output), results)
    return results


def _write_json(path: Path, doc: Any) -> None:
    write_json(path, doc, dumps=lambda d: json.dumps(d, indent=1) + "\n")


def _warm(root: Path, index: dict[str, Any], jobs: int) -> None:
    warm_artifacts([root / m / n for m, e in index.items() for n, p in e["plans"].items()
                    if "same_as" not in p], jobs)


def warm_artifacts(artifacts: list[Path], jobs: int) -> None:
    """Load every artifact once in ``jobs`` processes, so nvcc's results are on disk (CUDA
    keeps kernels as source in exported libraries) before the timing process loads them."""
    paths = [str(a) for a in artifacts]
    chunks = [paths[i::jobs] for i in range(jobs) if paths[i::jobs]]
    procs = [subprocess.Popen([sys.executable, "-m", "codl_tvm.planner.bundle", "--warm", *c])
             for c in chunks]
    failed = [p.wait() for p in procs]
    if any(failed):
        raise RuntimeError("loading an artifact of the bundle failed (see the messages above)")


def load_artifacts(artifacts: list[str]) -> None:
    """Load each artifact once: a process of :func:`warm_artifacts`."""
    from .. import runtime

    for path in artifacts:
        runtime.load(path, choose=False)


if __name__ == "__main__":
    from codl_tvm.commands.artifact import bundle_main

    sys.exit(bundle_main())
