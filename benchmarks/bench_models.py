"""End-to-end bench of every planner strategy on the zoo models, built here, timed on the H100.

    # here (full TVM): plans + artifacts for x86-cuda (Sapphire Rapids 16 cores + sm_90)
    python benchmarks/bench_models.py build --predictor P.json -o .devcarry/bench \
        [--models yolo-v2,vgg-16,...] [--oracle-samples oracle-samples.csv]
    # there (runtime-only TVM): time all plans of each model interleaved, in one process
    python benchmarks/bench_models.py run .devcarry/bench -o $OUT/bench-edge.json

``build`` also writes ``oracle-bundle/`` (profiler bundle of every op's sub-ops on the coarse
grid + sharing) unless ``--oracle-samples`` is given: the H100 run measures it with
``codl_tvm/profiler/bundle_runner.py``; a second ``build --oracle-samples`` then adds the
``oracle`` plan (the CoDL search on those measurements) and a second run times it.
Both halves are :mod:`codl_tvm.planner.bundle` (what ``codl-tvm bench --bundle`` writes and
``python -m codl_tvm.planner.bundle`` times) over the zoo models; ``run`` imports only numpy
and the TVM runtime.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODELS = ("yolo-v2", "vgg-16", "posenet", "fast-style-transfer", "resnet-18", "mobilenet-v1",
          "mobilenet-v2", "inception-v3", "lstm", "gru", "bert-base", "tiny-cnn")
PLANS = ("cpu-only", "gpu-only", "layer-to-processor", "mulayer", "eop-equal", "eop-fixed",
         "eop", "codl", "oracle")
CPU = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16}
GPU = {"kind": "cuda", "arch": "sm_90"}
# the strategies beside the two single processors: the tables' columns
STRATEGY_COLUMNS = [p for p in PLANS if p not in ("cpu-only", "gpu-only")]


def x86_cuda(shared_memory: bool | None = None):
    """The pair every plan of this bench is built for and priced on (``shared_memory``:
    plan as if the two processors shared one memory, as a phone's do)."""
    import codl_tvm

    return codl_tvm.DevicePair("x86-cuda", CPU, GPU, shared_memory=shared_memory)


def _scales(text: str) -> tuple[float, ...]:
    try:
        scales = tuple(float(x) for x in text.split(","))
    except ValueError:
        scales = ()
    if not scales or not all(x > 0 for x in scales):
        raise argparse.ArgumentTypeError(f"positive numbers separated by commas, not {text!r}")
    return scales


def build(args: argparse.Namespace) -> int:
    import codl_tvm
    from codl_tvm import zoo
    from codl_tvm.planner import MeasuredCosts, build_graph, bundle, predictor_costs
    from codl_tvm.planner.api import for_pair, oracle_jobs
    from codl_tvm.planner.strategies import Options
    from codl_tvm.predictor.opspec import SHARING_KINDS
    from codl_tvm.profiler import read_samples

    pair = x86_cuda(args.shared_memory or None)  # None: as the pair says (own memory)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    # as the pair runs splits: copies beside kernels on CUDA (planner.api.for_pair), block
    # copies unless --no-block-copies (priced and built so)
    blocks = args.block_copies
    costs = (for_pair(predictor_costs(args.predictor), pair, blocks) if args.predictor
             else None)
    oracle = None
    if args.oracle_samples:
        rows = read_samples(args.oracle_samples)
        if args.sharing_samples:  # copies measured since: they replace the oracle's
            rows = [r for r in rows if r["op"] not in SHARING_KINDS] + [
                r for r in read_samples(args.sharing_samples) if r["op"] in SHARING_KINDS]
        oracle = for_pair(MeasuredCosts(rows, "measured on the target"), pair, blocks)
    jobs = []
    for model in args.models.split(","):
        t0 = time.time()
        mod = codl_tvm.load_model(zoo.get(model))
        jobs += oracle_jobs(build_graph(mod), model=model)
        plans, source = args.plans.split(","), oracle
        if oracle is not None and not covers(oracle, build_graph(mod)):
            print(f"{model}: the oracle's samples do not cover its ops; built without the "
                  "oracle (measure its bundle again)", flush=True)
            plans, source = [p for p in plans if p != "oracle"], None
        entry = bundle.build(out, model, mod, pair, plans, costs, source,
                             block_copies=blocks, guard=args.guard,
                             candidates=args.candidates, cpu_scales=args.cpu_scales,
                             options=Options(branches=not args.no_branches))
        print(f"{model}: {len(entry['plans'])} plans, {time.time() - t0:.0f} s", flush=True)
    if not args.oracle_samples and not args.no_oracle_bundle:
        from codl_tvm.profiler.bundle import build_bundle

        build_bundle(pair, jobs, out / "oracle-bundle", max_bytes=args.bundle_mb << 20,
                     overwrite=True)  # this script's own folder, rebuilt
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    if args.pack:
        import tarfile

        with tarfile.open(args.pack, "w:gz") as tar:
            tar.add(out, arcname="bench")
        packed = Path(args.pack).stat().st_size / 2**20
        print(f"packed {args.pack} ({packed:.1f} MiB){' - over 20 MiB!' if packed > 20 else ''}")
    print(f"wrote {out} ({size / 2**20:.1f} MiB)")
    return 0


def run(args: argparse.Namespace) -> int:
    from codl_tvm.planner import bundle

    os.environ.setdefault("CODL_CUDA_CACHE", args.nvcc_cache)
    bundle.run(args.artifacts, args.output, args.rounds, args.deadline_s, args.jobs)
    return 0


def report(args: argparse.Namespace) -> int:
    """The result file (``benchmarks/results/bench-{edge,full}.json``) and BENCH.md's table from a
    runner's ``{model: rows}``."""
    import json

    from codl_tvm.outputs import write_json

    by_model = json.loads(Path(args.runs).read_text())
    rows = [{"model": m, **r} for m, rs in by_model.items() for r in rs]
    doc = {"sms": args.sms, "gpu": args.gpu, "rows": rows}
    write_json(args.output, doc, dumps=lambda d: json.dumps(d, indent=1) + "\n")
    print(markdown_table(rows))
    print(share_table(rows))
    print(candidates_table(rows))
    print(prediction_table(rows))
    return 0


def markdown_table(rows: list[dict]) -> str:
    """Per model: the single processors' latency, every strategy's speedup over the best of
    them, and codl's share of the ideal gain and latency against the oracle's. Where plans
    were guarded (``build --guard``), the speedup is of what the guard ran, and the last
    column is codl's plan's own speedup (what the guard measured of it)."""
    strategies = STRATEGY_COLUMNS
    guarded = any("guard" in r for r in rows)
    head = ["model", "CPU ms", "GPU ms", *strategies, "codl ideal_share", "codl / oracle",
            *(["codl plan alone (guard ran)"] if guarded else [])]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = {r["plan"]: r for r in rows if r["model"] == model}

        def cell(plan: str, key: str, fmt: str, mine=mine) -> str:
            v = mine.get(plan, {}).get(key)
            return "-" if v is None or v != v else format(v, fmt)

        codl, oracle = mine.get("codl"), mine.get("oracle")
        ratio = (f"{codl['latency_ms'] / oracle['latency_ms']:.2f}" if codl and oracle else "-")
        out.append("| " + " | ".join([
            model, cell("cpu-only", "latency_ms", ".2f"), cell("gpu-only", "latency_ms", ".2f"),
            *(cell(p, "speedup", ".2f") for p in strategies),
            cell("codl", "ideal_share", ".0%"), ratio,
            *([_plan_alone(mine)] if guarded else [])]) + " |")  # fmt: skip
    return "\n".join(out)


def share_table(rows: list[dict]) -> str:
    """Per model: every strategy's share of the ideal gain (``ideal_share``: 0 where it runs
    the best single processor, 1 where it reaches the per-op ideal); "-" where not built."""
    strategies = STRATEGY_COLUMNS
    out = ["| model | " + " | ".join(strategies) + " |", "|---|" + "---:|" * len(strategies)]
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = {r["plan"]: r.get("ideal_share") for r in rows if r["model"] == model}
        # a share that rounds to zero is printed as 0%, whatever its sign
        cells = ["-" if mine.get(p) is None else f"{mine[p]:.0%}".replace("-0%", "0%")
                 for p in strategies]
        out.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def _plan_alone(mine: dict[str, dict]) -> str:
    """codl's plan's own speedup over the best single processor, as the guard timed the
    three, and what the guard ran."""
    guard = mine.get("codl", {}).get("guard")
    if guard is None:
        return "-"
    ms = guard["latency_ms"]
    # a plan on one processor has no alternative of that name: it is its own
    single = min(ms.get("gpu-only", ms["plan"]), ms.get("cpu-only", ms["plan"]))
    return f"{single / ms['plan']:.2f} ({guard['chosen']})"


def own_latency_ms(row: dict) -> float:
    """A plan's own latency: where it was guarded, what the guard measured of the plan (the
    row's ``latency_ms`` is then what the guard ran, often another build)."""
    guard = row.get("guard")
    return guard["latency_ms"]["plan"] if guard else row["latency_ms"]


def _candidate_order(name: str) -> tuple[int, float, str]:
    """CPU-scale candidates (``plan-cpu-x1.25``) by their scale, then the others by name."""
    head, _, scale = name.partition("plan-cpu-x")
    try:
        return (0, float(scale), "") if not head else (1, 0.0, name)
    except ValueError:
        return (1, 0.0, name)


def candidates_table(rows: list[dict]) -> str:
    """Per model whose codl plan was guarded with candidates (``build --guard
    --candidates``): each build's speedup over the best single processor as the guard timed
    them where the artifact loaded, and what it ran; empty where no plan had candidates."""
    guards = {r["model"]: r["guard"] for r in rows if r["plan"] == "codl" and r.get("guard")}
    names = sorted({n for g in guards.values() for n in g["latency_ms"]
                    if n.startswith("plan-")}, key=_candidate_order)
    if not names:
        return ""
    out = ["| model | plan | " + " | ".join(names) + " | guard ran |",
           "|---|---:|" + "---:|" * len(names) + "---|"]
    for model, g in guards.items():
        ms = g["latency_ms"]
        single = min(ms.get("gpu-only", ms["plan"]), ms.get("cpu-only", ms["plan"]))
        cells = [f"{single / ms[n]:.2f}" if n in ms else "-" for n in ("plan", *names)]
        out.append(f"| {model} | " + " | ".join(cells) + f" | {g['chosen']} |")
    return "\n".join(out)


def prediction_table(rows: list[dict], band: float = 0.15) -> str:
    """How many plans' ``predicted_ms`` fall within ``band`` of their own latency, and the
    range of predicted / measured, for all plans and per kind."""
    kinds = {"all": rows,
             "gpu-only, layer-to-processor": [
                 r for r in rows
                 if r["plan"] in ("gpu-only", "layer-to-processor") and not r.get("guard")],
             "cpu-only": [r for r in rows if r["plan"] == "cpu-only"],
             "both processors (guarded plans)": [r for r in rows if r.get("guard")]}
    out = ["| plans | within +-15% | predicted / measured |", "|---|---:|---|"]
    for name, rs in kinds.items():
        ratios = [r["predicted_ms"] / own_latency_ms(r) for r in rs
                  if r.get("predicted_ms") and r.get("latency_ms")]
        if not ratios:
            continue
        inside = sum(abs(x - 1) <= band for x in ratios)
        out.append(f"| {name} | {inside} of {len(ratios)} | {min(ratios):.2f}-{max(ratios):.2f} |")
    return "\n".join(out)


def predictions(args: argparse.Namespace) -> int:
    import json

    for path in args.files:
        doc = json.loads(Path(path).read_text())
        rows = doc["rows"]
        if args.predictor:
            rows = repriced(rows, args.predictor, Path(args.plans))
        print(f"{path} ({doc.get('sms') or 'full'} SMs)\n{prediction_table(rows)}\n")
    return 0


def repriced(rows: list[dict], predictor: str, plans: Path) -> list[dict]:
    """``rows`` with each plan's ``predicted_ms`` estimated anew by ``predictor`` (e.g. one
    calibrated on samples measured in the same call as the bench), from the plans the
    build wrote (``plans/MODEL/PLAN.plan.json``), as the build priced them (CUDA copies
    beside kernels, block copies); each row printed beside the measured latency."""
    import codl_tvm
    from codl_tvm import zoo
    from codl_tvm.planner import build_graph, predictor_costs
    from codl_tvm.planner.api import estimate, for_pair

    costs = for_pair(predictor_costs(predictor), x86_cuda())
    graphs: dict[str, object] = {}
    out = []
    for r in rows:
        if r["model"] not in graphs:
            graphs[r["model"]] = build_graph(codl_tvm.load_model(zoo.get(r["model"])))
        plan = codl_tvm.Plan.load(plans / r["model"] / f"{r['plan']}.plan.json")
        ms, measured = estimate(graphs[r["model"]], plan, costs) / 1e3, own_latency_ms(r)
        print(f"{r['model']:>20} {r['plan']:>9}  predicted {r.get('predicted_ms', 0):8.2f} -> "
              f"{ms:8.2f} ms, measured {measured:8.2f} ms ({ms / measured:.2f})")
        out.append(r | {"predicted_ms": ms})
    return out


def covers(costs, mg) -> bool:
    """Whether ``costs`` (measured samples) price every op of ``mg`` whole on both
    processors (a model's new ops, e.g. a ConvTranspose the planner now splits, may lack
    them)."""
    from codl_tvm.planner.search import Evaluator

    ev = Evaluator(costs, mg.nodes)
    try:
        for node in mg.nodes:
            ev.whole(node, "cpu"), ev.whole(node, "gpu")
    except KeyError:
        return False
    return True


def oracle_share(args: argparse.Namespace) -> int:
    """What the oracle's own search reaches on its measurements: per model, CPU-only,
    GPU-only and the oracle's plan priced on the oracle's samples, and the plan's share of
    the ideal gain those same samples give (no run; a bound on what per-op splits at the
    measured shares can reach)."""
    import json

    import codl_tvm
    from codl_tvm import zoo
    from codl_tvm.planner import MeasuredCosts, build_graph
    from codl_tvm.planner.api import estimate, for_pair
    from codl_tvm.planner.timing import calibrated_ideal_us
    from codl_tvm.profiler import read_samples

    costs = for_pair(MeasuredCosts(read_samples(args.oracle_samples)), x86_cuda())
    build_dir = Path(args.plans)
    index = json.loads((build_dir / "index.json").read_text())
    print("| model | CPU-only ms | GPU-only ms | ideal ms | oracle's plan ms "
          "| share of ideal gain |")
    print("|---|---:|---:|---:|---:|---:|")
    for model, entry in index.items():
        mg = build_graph(codl_tvm.load_model(zoo.get(model)))
        est = {p: estimate(mg, codl_tvm.Plan.load(build_dir / model / f"{p}.plan.json"), costs)
               for p in ("cpu-only", "gpu-only", "oracle")}
        ideal = calibrated_ideal_us(entry["per_op_us"], est["cpu-only"], est["gpu-only"])
        best = min(est["cpu-only"], est["gpu-only"])
        print(f"| {model} | {est['cpu-only'] / 1e3:.2f} | {est['gpu-only'] / 1e3:.2f} | "
              f"{ideal / 1e3:.2f} | {est['oracle'] / 1e3:.2f} | "
              f"{(best - est['oracle']) / (best - ideal):.0%} |")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--predictor", help="codl predictor JSON of the x86-cuda pair")
    b.add_argument("--oracle-samples", help="samples CSV the oracle bundle produced")
    b.add_argument("--sharing-samples", help="samples CSV whose copy, slice and concat rows "
                   "replace those of --oracle-samples (measured later, on the same target)")
    b.add_argument("--models", default=",".join(MODELS))
    b.add_argument("--plans", default=",".join(PLANS))
    b.add_argument("--block-copies", action=argparse.BooleanOptionalAction, default=None,
                   help="plan and build splits with or without block copies (default: with)")
    b.add_argument("--guard", action="store_true",
                   help="plans that use both processors run the fastest of themselves, "
                        "GPU-only and CPU-only, timed where they load (compile's guard)")
    b.add_argument("--candidates", action="store_true",
                   help="codl's plan also holds its candidates for other CPU speeds "
                        "(codl_tvm.planner.candidates); with --guard the fastest runs")
    b.add_argument("--cpu-scales", type=_scales, default=None, metavar="S,S,...",
                   help="with --candidates: plan them for the CPU's kernels these times as "
                        "long (default: codl_tvm.planner.candidates.CPU_SCALES)")
    b.add_argument("--shared-memory", action="store_true",
                   help="plan as if the CPU and the GPU shared one memory: the memory cap "
                        "counts both processors' bytes (a phone's rule; the baseline of a "
                        "discrete GPU's, which counts the GPU's)")
    b.add_argument("--no-branches", action="store_true",
                   help="codl never runs parallel branches whole on both processors at once")
    b.add_argument("--bundle-mb", type=int, default=8, help="size cap of the oracle bundle")
    b.add_argument("--no-oracle-bundle", action="store_true")
    b.add_argument("--pack", help="also write this .tgz of the output (what travels)")
    b.add_argument("-o", "--output", default=".devcarry/bench")
    r = sub.add_parser("run")
    r.add_argument("artifacts")
    r.add_argument("--rounds", type=int, default=15)
    r.add_argument("--deadline-s", type=float, default=300)
    r.add_argument("--jobs", type=int, default=12, help="processes compiling CUDA first")
    r.add_argument("--nvcc-cache", default="/tmp/codl-nvcc-cache")
    r.add_argument("-o", "--output", default=os.path.join(os.environ.get("OUT", "."),
                                                          "bench-h100.json"))
    t = sub.add_parser("report", help="result file + BENCH.md table from a run's JSON")
    t.add_argument("runs", help="the runner's JSON ({model: rows})")
    t.add_argument("--sms", type=int, required=True, help="SMs the GPU ran with")
    t.add_argument("--gpu", default="", help="the GPU's name")
    t.add_argument("-o", "--output", required=True)
    w = sub.add_parser("predictions", help="predicted_ms against each plan's own latency")
    w.add_argument("files", nargs="+", help="result files (benchmarks/results/bench-*.json)")
    w.add_argument("--predictor", help="price every plan anew with this predictor JSON")
    w.add_argument("--plans", help="with --predictor: the build's folder (MODEL/PLAN.plan.json)")
    o = sub.add_parser("oracle-share", help="the oracle's plans priced on its own samples")
    o.add_argument("oracle_samples", help="the samples CSV the oracle was planned on")
    o.add_argument("--plans", required=True, help="the build's folder (MODEL/PLAN.plan.json)")
    args = p.parse_args()
    if args.cmd == "predictions" and args.predictor and not args.plans:
        p.error("predictions --predictor needs --plans (the build's folder)")
    return {"build": build, "run": run, "report": report,
            "predictions": predictions, "oracle-share": oracle_share}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
