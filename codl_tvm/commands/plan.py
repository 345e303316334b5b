"""``codl-tvm plan`` and ``codl-tvm bench`` (library: :mod:`codl_tvm.planner`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..outputs import check_output_file, write_json
from ..planner.strategies import STRATEGIES, Options
from . import Command, add_model_arguments, add_pair_arguments, load_model
from .artifact import add_rpc_arguments


def _common(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    add_pair_arguments(p)
    p.add_argument("--predictor", help="predictor JSON, or 'measured' to measure every op here "
                                       "(default: the one shipped for the pair, else measured)")
    p.add_argument("--cache", help="samples file for measured costs "
                                   "(default: costs-MODEL-PAIR.csv next to -o/--json)")


def _load(args: argparse.Namespace, out: str | None):
    from .. import DevicePair

    mod = load_model(args)
    pair = DevicePair.parse(args.pair, arch=args.arch)
    cache = args.cache or str(cache_folder(out) / f"costs-{Path(args.model).stem}-{pair.name}.csv")
    return mod, pair, cache


def cache_folder(out: str | None) -> Path:
    """Where the measured-costs cache goes by default: beside the command's output file,
    else the working directory (never above it)."""
    return Path(out).resolve().parent if out else Path.cwd()


def memory_cap(text: str) -> float | None:
    """``--memory-cap``: a ratio of at least 1, or ``off`` (None: no cap)."""
    if text.strip().lower() in ("off", "none"):
        return None
    try:
        cap = float(text)
    except ValueError:
        cap = float("nan")
    if not cap >= 1.0:
        raise ValueError(f"--memory-cap must be a ratio of at least 1 or 'off', got {text!r}")
    return cap


def _add_plan(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--strategy", default="codl", choices=list(STRATEGIES))
    p.add_argument("-o", "--output", required=True, help="plan JSON to write")
    p.add_argument("--block-copies", action=argparse.BooleanOptionalAction, default=None,
                   help="price splits as `compile` builds them with (default on a CUDA GPU) "
                        "or without 2-D block copies")
    p.add_argument("--cpu-chunks", type=int, default=None, metavar="N",
                   help="price row splits as `compile --cpu-chunks N` builds them (default: "
                        "the pair's, 2 where copies overlap kernels)")
    p.add_argument("--memory-cap", default=str(Options.memory_cap),
                   metavar="RATIO", help="most memory a plan may take against the GPU-only "
                   "plan's, counting what the roles share: both where they share one memory, "
                   "the GPU's where it has its own (default %(default)s; 'off': no cap)")
    p.add_argument("--no-branches", action="store_true",
                   help="codl: never run parallel branches whole on both processors at once "
                        "(by default it does where the estimate says that wins)")
    p.add_argument("--candidates", action="store_true",
                   help="also plan for a CPU slower or faster than predicted and keep the "
                        "distinct plans as candidates: `compile --guard` builds them beside "
                        "the plan and the runtime runs the fastest")


def _run_plan(args: argparse.Namespace) -> int:
    from ..explain import format_table, plan_rows
    from ..geometry import check_cpu_chunks
    from ..planner.api import make_plan, resolve_costs
    from ..planner.opgraph import build_graph

    check_cpu_chunks(args.cpu_chunks, "--cpu-chunks")  # before any work
    options = Options(memory_cap=memory_cap(args.memory_cap), branches=not args.no_branches)
    mod, pair, cache = _load(args, args.output)
    costs = None
    if args.strategy not in ("cpu-only", "gpu-only"):
        want = "measured" if STRATEGIES[args.strategy].measured else args.predictor
        costs = resolve_costs(want, pair, mod, cache, block_copies=args.block_copies,
                              cpu_chunks=args.cpu_chunks)
    mg = build_graph(mod)
    result = make_plan(mg, args.strategy, costs, options)
    found = {}
    if args.candidates and costs is not None:
        from ..planner.candidates import with_candidates

        found = with_candidates(result, mg, costs, args.strategy, options=options)
    result.plan.save(args.output, inputs=[path for path in (args.model, args.predictor, cache)
                                          if path and Path(path).exists()])
    print(format_table(plan_rows(mod, result.plan),
                       ["op", "kind", "out", "place", "dim", "ratio", "chain"]))
    src = costs.label if costs is not None else "no costs"
    for label, res in found.items():
        splits = sum(p.place == "split" for p in res.plan.ops.values())
        print(f"candidate {label}: {splits} split ops, predicted {res.predicted_us / 1e3:.3f} ms "
              f"on its costs")
    if args.candidates and not found:
        print("candidates: none (every CPU speed tried gives this plan or one processor)")
    for note in result.layout.notes:
        print(note)
    print(f"{args.strategy}: predicted {result.predicted_us / 1e3:.3f} ms ({src}); "
          f"wrote {args.output}")
    return 0


def _add_bench(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--plans", default=",".join(STRATEGIES),
                   help="comma-separated strategies (default: all)")
    p.add_argument("--rounds", type=int, default=10, help="interleaved timing rounds")
    p.add_argument("--json", help="write the rows to this JSON file")
    p.add_argument("--bundle", metavar="DIR",
                   help="offline: compile the plans into DIR and stop; time them on the target "
                        "with `python -m codl_tvm.planner.bundle DIR -o rows.json`")
    p.add_argument("--guard", action="store_true",
                   help="with --bundle: plans that use both processors run the fastest of "
                        "themselves, gpu-only and cpu-only, timed where they load")
    p.add_argument("--candidates", action="store_true",
                   help="with --bundle --guard: codl's plan also holds its candidates for a "
                        "CPU slower or faster than predicted (see `plan --candidates`)")
    add_rpc_arguments(p)


def _run_bench(args: argparse.Namespace) -> int:
    from ..planner.api import resolve_costs
    from ..planner.bench import bench
    from ..planner.timing import format_rows

    names = [n.strip() for n in args.plans.split(",") if n.strip()]
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown plan(s) {unknown}; known: {', '.join(STRATEGIES)}")
    mod, pair, cache = _load(args, args.json)
    if args.json:
        check_output_file(args.json, [args.model])
    remote = ({"rpc": args.rpc, "tracker": args.rpc_tracker, "key": args.rpc_key}
              if args.rpc or args.rpc_tracker else None)
    needs = [n for n in names if n not in ("cpu-only", "gpu-only")]
    costs = resolve_costs(args.predictor, pair, mod, cache, remote) if needs else None
    oracle = None
    if any(STRATEGIES[n].measured for n in names):
        oracle = costs if args.predictor in (None, "measured") and _is_measured(costs) else (
            resolve_costs("measured", pair, mod, cache, remote))
    if args.bundle:
        return _write_bundle(args, mod, pair, names, costs, oracle)
    session = None
    if remote is not None:
        from ..deploy import rpc

        session = rpc.connect(rpc=args.rpc, tracker=args.rpc_tracker, key=args.rpc_key,
                              timeout_s=args.rpc_timeout)
    rows = bench(mod, pair, names, costs, oracle, rounds=args.rounds, session=session)
    print(format_rows(rows))
    if args.json:
        write_json(args.json, rows, [args.model])
    return 0


def _write_bundle(args: argparse.Namespace, mod, pair, names, costs, oracle) -> int:
    from ..planner import bundle

    if args.guard:  # the alternatives every guarded plan refers to
        names = list(dict.fromkeys(["gpu-only", "cpu-only", *names]))
    entry = bundle.build(args.bundle, Path(args.model).stem, mod, pair, names, costs, oracle,
                         guard=args.guard, candidates=args.candidates)
    distinct = sum("same_as" not in p for p in entry["plans"].values())
    print(f"wrote {len(entry['plans'])} plans ({distinct} distinct) of {args.model} to "
          f"{args.bundle}; on the target: python -m codl_tvm.planner.bundle {args.bundle} "
          f"-o rows.json")
    return 0


def _is_measured(costs) -> bool:
    from ..planner.costs import MeasuredCosts

    return isinstance(getattr(costs, "costs", costs), MeasuredCosts)  # SerialCosts wraps


COMMANDS = {
    "plan": Command("plan a model's CPU+GPU partition", _add_plan, _run_plan),
    "bench": Command("compile and time plans of a model side by side", _add_bench, _run_bench),
}
