"""``codl-tvm explain``: the per-op table of a plan and its timeline picture."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from . import Command, add_model_arguments, load_model

PLOT_HINT = "matplotlib is not installed (pip install 'codl-tvm[plot]')"


def _add(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    p.add_argument("--pair", help="device pair (default: the predictor's pair, else auto)")
    p.add_argument("--arch", help="CUDA arch such as sm_90 (detected when omitted)")
    p.add_argument("--plan", required=True, help="plan JSON (from `codl-tvm plan`)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--predictor", help="predictor JSON (from `codl-tvm train`) for the times")
    how.add_argument("--measure", action="store_true",
                     help="compile and time every (sub-)op alone on the pair (slower)")
    p.add_argument("--repeat", type=int, default=10, help="timings per op with --measure")
    p.add_argument("--png", metavar="FILE", help="draw the timeline to FILE (.png/.svg/.pdf)")
    p.add_argument("--json", action="store_true", help="print rows and totals as JSON")


def _costs(args: argparse.Namespace):
    from ..device import DevicePair
    from ..planner.costs import AnalyticCosts, MeasuredCosts, PredictorCosts

    if args.predictor:
        from ..predictor import load

        pred = load(args.predictor)
        if args.pair and args.pair != pred.pair_:
            warnings.warn(f"the predictor was trained on pair {pred.pair_!r}, not {args.pair!r}",
                          stacklevel=2)
        label = f"predicted by the {pred.kind} predictor {Path(args.predictor).name} " \
                f"(pair {pred.pair_})"
        costs = PredictorCosts(pred, label)
        return _as_run(costs, args.pair or pred.pair_, args.arch), pred.pair_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # auto's fallback shows in the pair name
        pair = DevicePair.parse(args.pair or "auto", arch=args.arch)
    costs = (MeasuredCosts(pair=pair, repeat=args.repeat) if args.measure
             else AnalyticCosts.placeholder())
    return costs, pair.name


def _as_run(costs, pair_name: str, arch: str | None):
    """Predicted costs priced as the pair runs a split, as the planner does
    (:func:`~codl_tvm.planner.api.for_pair`): parts one after the other where both roles
    share the host's cores (the cpu-pair), copies beside kernels where the GPU is CUDA.
    A pair this machine cannot rebuild from its name is priced with one stream."""
    from ..device import DevicePair
    from ..planner.api import for_pair

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            # the arch only completes the GPU target; the pair's kind is what counts here
            pair = DevicePair.parse(pair_name, arch=arch or "sm_90")
    except ValueError:
        return costs
    return for_pair(costs, pair)


def _run(args: argparse.Namespace) -> int:
    from ..explain import explain
    from ..plan import Plan

    mod = load_model(args)
    plan = Plan.load(args.plan)
    costs, pair_name = _costs(args)
    result = explain(mod, plan, costs)
    tl = result.timeline
    # a plan's candidates (`plan --candidates`): what the same costs make of each
    cands = {label: {"split_ops": sum(p.place == "split" for p in cand.ops.values()),
                     "coexec": explain(mod, cand, costs).timeline.coexec_us}
             for label, cand in plan.candidates.items()}
    if args.json:
        print(json.dumps({"rows": result.rows, "source": result.source, "unit": result.unit,
                          "coexec": tl.coexec_us, "share": tl.share_us,
                          "cpu_only": tl.cpu_only_us, "gpu_only": tl.gpu_only_us,
                          "planned": result.planned_us,
                          "notes": result.notes, "candidates": cands}, indent=1))  # fmt: skip
    else:
        print(f"{Path(args.model).stem} on {pair_name}, plan {args.plan}")
        print(result.table())
        print(result.summary())
        for label, c in cands.items():
            print(f"candidate {label}: {c['split_ops']} split ops, {c['coexec']:.1f} "
                  f"{result.unit} on these costs (a guarded build runs the fastest)")
        for note in result.notes:
            print(f"note: {note}")
    if args.png:
        _draw(result, args.png, f"{Path(args.model).stem} on {pair_name}")
    return 0


def _draw(result, png: str, what: str) -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"no timeline drawn: {PLOT_HINT}; the table above is all", file=sys.stderr)
        return
    from ..timeline import draw

    tl = result.timeline
    split = sum(r["place"] == "split" for r in result.rows)
    title = f"{what}: {split}/{len(result.rows)} ops split. Times {result.source}\n" + (
        result.summary().splitlines()[-1])
    print(f"timeline: {draw(tl, png, title=title, unit=result.unit)}")


COMMANDS = {
    "explain": Command("per-op table of a plan (dim, ratio, chain, CPU/GPU/sharing time) and "
                       "its timeline picture", _add, _run),
}
