"""End-to-end bench of every planner strategy on the zoo models, built here, timed on the H100.

    # here (full TVM): plans + artifacts for x86-cuda (Sapphire Rapids 16 cores + sm_90)
    python benchmarks/bench_models.py build --predictor P.json -o .devcarry/bench \
        [--models yolo-v2,vgg-16,...] [--oracle-samples oracle-samples.csv]
    # there (runtime-only TVM): time all plans of each model interleaved, in one process
    python benchmarks/bench_models.py run .devcarry/bench -o $OUT/bench-h100.json

``build`` also writes ``oracle-bundle/`` (profiler bundle of every op's sub-ops on the coarse
grid + sharing) unless ``--oracle-samples`` is given: the H100 run measures it with
``codl_tvm/profiler/bundle_runner.py``; a second ``build --oracle-samples`` then adds the
``oracle`` plan (the CoDL search on those measurements) and a second run times it.
``run`` imports only numpy and the TVM runtime (plus codl_tvm.runtime / planner.timing).
"""

from __future__ import annotations

import argparse
import json
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


def build(args: argparse.Namespace) -> int:
    import codl_tvm
    from codl_tvm import zoo
    from codl_tvm.planner import MeasuredCosts, build_graph, make_plan, predictor_costs
    from codl_tvm.planner.api import oracle_jobs
    from codl_tvm.planner.bench import plan_key
    from codl_tvm.planner.search import Evaluator
    from codl_tvm.profiler import read_samples

    pair = codl_tvm.DevicePair("x86-cuda", CPU, GPU)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    costs = predictor_costs(args.predictor) if args.predictor else None
    oracle = (MeasuredCosts(read_samples(args.oracle_samples), "measured on the H100")
              if args.oracle_samples else None)
    index_path = out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    jobs = []
    for model in args.models.split(","):
        t0 = time.time()
        mod = codl_tvm.load_model(zoo.get(model))
        mg = build_graph(mod)
        jobs += oracle_jobs(mg, model=model)
        src = oracle or costs
        entry = index.setdefault(model, {"plans": {}})
        if src is not None:
            ev = Evaluator(src)
            entry["per_op_us"] = [[ev.whole(n, "cpu"), ev.whole(n, "gpu")] for n in mg.nodes]
            entry["per_op_source"] = src.label
        for name in args.plans.split(","):
            use = oracle if name == "oracle" else costs
            if use is None and name not in ("cpu-only", "gpu-only"):
                print(f"{model}: skip {name} (needs "
                      f"{'--oracle-samples' if name == 'oracle' else '--predictor'})")
                continue
            res = make_plan(mg, name, use)
            key = plan_key(res.plan)
            rep = next((n for n, p in entry["plans"].items()
                        if p.get("key") == key and "same_as" not in p), name)
            if rep == name:  # identical plans are compiled and timed once
                exe = codl_tvm.compile(mod, pair, res.plan)
                exe.export(out / model / name, weights=False)
            res.plan.save(out / model / f"{name}.plan.json")
            entry["plans"][name] = {"predicted_ms": res.predicted_us / 1e3,
                                    "cpu_mem_mb": res.memory["cpu_bytes"] / 2**20,
                                    "gpu_mem_mb": res.memory["gpu_bytes"] / 2**20, "key": key}
            if rep != name:
                entry["plans"][name]["same_as"] = rep
        index_path.write_text(json.dumps(index, indent=1))
        print(f"{model}: {len(mg.nodes)} ops, {time.time() - t0:.0f} s", flush=True)
    if not args.oracle_samples and not args.no_oracle_bundle:
        from codl_tvm.profiler.bundle import build_bundle

        build_bundle(pair, jobs, out / "oracle-bundle", max_bytes=args.bundle_mb << 20)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    if args.pack:
        import tarfile

        with tarfile.open(args.pack, "w:gz") as tar:
            tar.add(out, arcname="bench")
        packed = Path(args.pack).stat().st_size / 2**20
        print(f"packed {args.pack} ({packed:.1f} MiB){' - over 20 MiB!' if packed > 20 else ''}")
    print(f"wrote {out} ({size / 2**20:.1f} MiB)")
    return 0


def _cache_nvcc(cache_dir: Path) -> None:
    """nvcc results cached by source hash: artifacts are warmed in parallel processes, then
    the timing process loads every library without compiling again."""
    import hashlib

    from codl_tvm import runtime

    compile_once = runtime._nvcc_compile
    cache_dir.mkdir(parents=True, exist_ok=True)

    def cached(code: str, target: str | None = None) -> bytearray:
        path = cache_dir / (hashlib.sha256(code.encode()).hexdigest() + ".fatbin")
        if path.exists():
            return bytearray(path.read_bytes())
        data = compile_once(code, target)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(bytes(data))
        os.replace(tmp, path)
        return data

    runtime._nvcc_compile = cached


def warm(args: argparse.Namespace) -> int:
    from codl_tvm import runtime

    _cache_nvcc(Path(args.cache))
    for path in args.paths:
        runtime.load(path)
    return 0


def _prewarm(root: Path, paths: list[Path], jobs: int, cache: Path) -> None:
    import subprocess

    chunks = [paths[i::jobs] for i in range(jobs) if paths[i::jobs]]
    procs = [subprocess.Popen([sys.executable, __file__, "warm", "--cache", str(cache),
                               *map(str, c)]) for c in chunks]
    for p in procs:
        p.wait()


def run(args: argparse.Namespace) -> int:
    from codl_tvm import runtime
    from codl_tvm.planner.timing import (
        calibrated_ideal_us,
        format_rows,
        interleaved,
        same_as,
        summarize,
    )

    root = Path(args.artifacts)
    index = json.loads((root / "index.json").read_text())
    cache = Path(args.nvcc_cache)
    _cache_nvcc(cache)
    if args.jobs > 1:
        t0 = time.time()
        paths = [root / m / n for m in index for n in PLANS if (root / m / n).exists()]
        _prewarm(root, paths, args.jobs, cache)
        print(f"compiled CUDA kernels of {len(paths)} artifacts in {time.time() - t0:.0f} s",
              flush=True)
    results, start = {}, time.time()
    for model, entry in index.items():
        plans = entry["plans"]
        reps = {n: plans[n].get("same_as", n) for n in PLANS
                if n in plans and (root / model / plans[n].get("same_as", n)).exists()}
        names = [n for n in reps if reps[n] == n]
        if not names:
            continue
        left = args.deadline_s - (time.time() - start)
        if left < 20:
            print(f"{model}: skipped, deadline reached")
            continue
        runners = [runtime.load(root / model / n) for n in names]
        inputs = [r.random_inputs(0) for r in runners]
        times = interleaved(runners, inputs, rounds=args.rounds, deadline_s=min(left, 60))
        times = [times[names.index(reps[n])] for n in reps]
        names = list(reps)
        lat = {n: sorted(t)[len(t) // 2] * 1e6 for n, t in zip(names, times)}
        ideal = None
        if entry.get("per_op_us") and "cpu-only" in lat and "gpu-only" in lat:
            ideal = calibrated_ideal_us(entry["per_op_us"], lat["cpu-only"], lat["gpu-only"])
        pred = {n: entry["plans"][n]["predicted_ms"] * 1e3 for n in names}
        extra = {n: {k: v for k, v in entry["plans"][n].items() if k.endswith("_mb")}
                 | same_as(reps).get(n, {}) for n in names}
        rows = summarize(names, times, pred, ideal, extra)
        results[model] = rows
        print(f"\n== {model} ({len(times[0])} rounds)\n{format_rows(rows)}", flush=True)
        Path(args.output).write_text(json.dumps(results, indent=1))
        del runners
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--predictor", help="codl predictor JSON of the x86-cuda pair")
    b.add_argument("--oracle-samples", help="samples CSV the oracle bundle produced")
    b.add_argument("--models", default=",".join(MODELS))
    b.add_argument("--plans", default=",".join(PLANS))
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
    w = sub.add_parser("warm")
    w.add_argument("--cache", required=True)
    w.add_argument("paths", nargs="+")
    r.add_argument("-o", "--output", default=os.path.join(os.environ.get("OUT", "."),
                                                          "bench-h100.json"))
    args = p.parse_args()
    return {"build": build, "run": run, "warm": warm}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
