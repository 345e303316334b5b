"""Compile options against each other: kernels per inference and latency, in one run.

Each model is built per plan with every option set of :data:`BUILDS` that applies to it:

- ``unfused``: ``fuse=False``, one kernel per op (the baseline);
- ``fused``: the default, elementwise ops inside the kernel before them (FuseEpilogues) and,
  on a CUDA GPU, a split's rows moved by 2-D block copies, the GPU's kernels on the whole
  tensors (LowerSlicesToBlockCopies);
- ``fused+graph``: also ``cuda_graph=True``, kernels captured into CUDA graphs (GPU-only plans
  on a CUDA GPU);
- ``one-stream``: ``overlap=False``, a split's kernels and copies on one CUDA stream (the
  default puts them beside each other: OverlapCopies; split plans on a CUDA GPU);
- ``kernel-slices``: ``block_copies=False``, a split's row slices and concat as kernels
  (split plans on a CUDA GPU);
- ``gpu-copies``: ``block_in_kernels=False``, block copies with the GPU's rows moved by
  copies within the GPU instead of read in place;
- ``model-order``: ``issue_gpu_first=False``, bindings in the model's order (the default
  issues the GPU's ready work before the host computes: IssueGpuWorkFirst).

All builds of a model are timed interleaved in one process, so the ratios are what the options
change; each is compared with its plan's first build (``unfused`` where it is built). Plans:
GPU-only and an output-channel split at GPU share 0.75 (codl's common choice at 8 SMs), and,
with ``--plans-from [NAME=]DIR,...``, GPU-only and each model's ``DIR/MODEL/codl.plan.json``
(a bench bundle's codl plans, ``bench_models.py build``) named NAME (default ``codl``);
``--builds`` picks the builds. Artifacts carry no
weights: random ones are made where they run, seeded by each real weight's value, so every
build gets the same ones and must give its base build's output.

Here, on the cpu-pair (both roles on this CPU)::

    python benchmarks/build_options.py all --pair cpu-pair \
        -o benchmarks/results/build-options-cpu-pair.json

On the GPU machine: ``build --pair x86-cuda-h100 --out .devcarry/build-options`` here, then
``run DIR -o out.json`` there (runtime-only TVM; ``run_edge_h100.sh options`` does both
configurations), ``report out.json`` here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODELS = ("resnet-18", "mobilenet-v2", "fast-style-transfer")
PLANS = {"gpu-only": None, "OC@0.75": ("OC", 0.75)}
BASELINE = "unfused"
# build name -> (compile options, whether it applies to a plan name on a pair)
BUILDS = {
    BASELINE: ({"fuse": False}, lambda plan, cuda: True),
    "fused": ({}, lambda plan, cuda: True),
    "fused+graph": ({"cuda_graph": True}, lambda plan, cuda: cuda and plan == "gpu-only"),
    "one-stream": ({"overlap": False}, lambda plan, cuda: cuda and plan != "gpu-only"),
    "kernel-slices": ({"block_copies": False}, lambda plan, cuda: cuda and plan != "gpu-only"),
    "gpu-copies": ({"block_in_kernels": False},
                   lambda plan, cuda: cuda and plan != "gpu-only"),
    "model-order": ({"issue_gpu_first": False},
                    lambda plan, cuda: cuda and plan != "gpu-only"),
}
H100_CPU = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16}
H100_GPU = {"kind": "cuda", "arch": "sm_90"}


def _pair(name: str):
    import codl_tvm

    if name == "x86-cuda-h100":
        return codl_tvm.DevicePair("x86-cuda", H100_CPU, H100_GPU)
    return codl_tvm.DevicePair.parse(name)


def weight_seeds(exe) -> dict[str, int]:
    """A seed per weight parameter from its value: builds that hold the same weights under
    other names (or orders) get the same random weights where they run."""
    import zlib

    return {name: zlib.crc32(value.tobytes()) for name, value in exe.params.items()}


def _runner(folder: Path, seeds: dict[str, int]):
    """The artifact with random weights made from ``seeds`` (see :func:`weight_seeds`)."""
    import numpy as np

    from codl_tvm import runtime

    manifest = json.loads((folder / runtime.MANIFEST).read_text())
    weights = {p["name"]: (0.05 * np.random.default_rng(seeds[p["name"]]).standard_normal(
        p["shape"])).astype(p["dtype"]) for p in runtime.stored_params(manifest)}
    return runtime.load(folder, params=weights)


def build(args: argparse.Namespace) -> int:
    import codl_tvm
    from codl_tvm import zoo
    from codl_tvm.outputs import write_json
    from codl_tvm.plan import Plan

    pair, out = _pair(args.pair), Path(args.out)
    index = []
    cuda = pair.gpu_target.kind.name == "cuda"
    builds = args.builds.split(",")
    for model in args.models.split(","):
        mod = codl_tvm.load_model(zoo.get(model))
        plans = {name: None if spec is None else Plan.uniform(mod, *spec)
                 for name, spec in PLANS.items()}
        if args.plans_from:
            plans = {"gpu-only": None}
            for source in args.plans_from.split(","):
                name, _, folder = source.rpartition("=")
                plans[name or "codl"] = Plan.load(Path(folder) / model / "codl.plan.json")
        for plan_name, plan in plans.items():
            for build_name, (options, applies) in BUILDS.items():
                if build_name not in builds or not applies(plan_name, cuda):
                    continue
                name = f"{model}.{plan_name}.{build_name}"
                t0 = time.time()
                exe = codl_tvm.compile(mod, pair, plan, **options)
                exe.export(out / name, weights=False, overwrite=True)
                index.append({"model": model, "plan": plan_name, "build": build_name,
                              "dir": name, "kernels": exe.kernel_calls(),
                              "seeds": weight_seeds(exe)})
                print(f"{name}: {index[-1]['kernels']} kernels, {time.time() - t0:.0f} s",
                      flush=True)
    write_json(out / "index.json", {"pair": args.pair, "rows": index})
    return 0


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from codl_tvm.outputs import write_json
    from codl_tvm.planner.bundle import warm_artifacts
    from codl_tvm.planner.timing import interleaved

    folder = Path(args.artifacts)
    doc = json.loads((folder / "index.json").read_text())
    rows = doc["rows"]
    warm_artifacts([folder / r["dir"] for r in rows], args.jobs)
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        runners = [_runner(folder / r["dir"], r["seeds"]) for r in mine]
        inputs = [rn.random_inputs(0) for rn in runners]
        outs = [rn.run(x) for rn, x in zip(runners, inputs)]
        times = interleaved(runners, inputs, rounds=args.rounds)
        again = [rn.run(x) for rn, x in zip(runners, inputs)]

        for r, out, t, second in zip(mine, outs, times, again):
            base = _base(mine, r)
            r["base"] = mine[base]["build"]
            r["latency_ms"] = float(np.median(t) * 1e3)
            r["rel_err_vs_base"] = rel_err(out, outs[base])
            r["rel_err_vs_itself"] = rel_err(second, out)  # after the timed rounds
        print(table(mine), flush=True)
    rows = [{k: v for k, v in r.items() if k != "seeds"} for r in rows]
    write_json(args.output, {"pair": doc["pair"], "rows": rows},
               dumps=lambda d: json.dumps(d, indent=1) + "\n")
    return 0


def rel_err(got: list, want: list) -> float:
    import numpy as np

    return max(float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
               for a, b in zip(got, want))


def _base(rows: list[dict], r: dict) -> int:
    """Index of the build ``r`` is compared with: its plan's unfused build, else its first."""
    same = [i for i, x in enumerate(rows) if x["model"] == r["model"] and x["plan"] == r["plan"]]
    return next((i for i in same if rows[i]["build"] == BASELINE), same[0])


def table(rows: list[dict]) -> str:
    """Markdown: per model, plan and build, kernels and latency against the plan's base build
    (unfused where it was built)."""
    out = ["| model | plan | build | kernels | ms | vs base | rel. error vs base | "
           "run to run |", "|---|---|---|---:|---:|---:|---:|---:|"]
    timed = [r for r in rows if "latency_ms" in r]
    for r in timed:
        base = timed[_base(timed, r)]
        err = r.get("rel_err_vs_base", r.get("rel_err_vs_unfused"))
        out.append(f"| {r['model']} | {r['plan']} | {r['build']} ({base['build']}) | "
                   f"{r['kernels']} | {r['latency_ms']:.2f} | "
                   f"{r['latency_ms'] / base['latency_ms']:.2f} | {err:.1e} | "
                   f"{r['rel_err_vs_itself']:.1e} |")
    return "\n".join(out)


def report(args: argparse.Namespace) -> int:
    print(table(json.loads(Path(args.runs).read_text())["rows"]))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("build", "all"):
        b = sub.add_parser(name)
        b.add_argument("--pair", default="cpu-pair",
                       help="a preset, a pair JSON, or x86-cuda-h100 (sm_90 + Sapphire Rapids)")
        b.add_argument("--models", default=",".join(MODELS))
        b.add_argument("--out", default="/tmp/codl-build-options")
        b.add_argument("--builds", default=",".join(BUILDS), help="which of " + ", ".join(BUILDS))
        b.add_argument("--plans-from", help="bench bundles [NAME=]DIR,...: each "
                       "DIR/MODEL/codl.plan.json as plan NAME (default codl), beside GPU-only")
        if name == "all":
            b.add_argument("--rounds", type=int, default=7)
            b.add_argument("--jobs", type=int, default=1)
            b.add_argument("-o", "--output",
                           default="benchmarks/results/build-options-cpu-pair.json")
    r = sub.add_parser("run")
    r.add_argument("artifacts")
    r.add_argument("--rounds", type=int, default=15)
    r.add_argument("--jobs", type=int, default=1, help="processes compiling CUDA first")
    r.add_argument("-o", "--output", required=True)
    rp = sub.add_parser("report")
    rp.add_argument("runs")
    args = p.parse_args()
    if args.cmd == "all":
        build(args)
        args.artifacts = args.out
        return run(args)
    return {"build": build, "run": run, "report": report}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
