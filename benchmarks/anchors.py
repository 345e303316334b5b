"""codl-tvm beside onnxruntime and PyTorch: the same models, weights and inputs, one process.

    # here (full TVM, onnx, torch, torchvision): artifacts and models without weights
    python benchmarks/anchors.py build --out .devcarry/anchors --pair cpu-pair
    python benchmarks/anchors.py build --out .devcarry/anchors-h100 --pair x86-cuda --arch sm_90 \
        --pack .devcarry/anchors-h100.tgz
    # there (runtime-only TVM, numpy, onnxruntime, torch; torchvision optional); on a host
    # shared with other work add --omp-passive
    python benchmarks/anchors.py run .devcarry/anchors --json OUT.json --threads N --machine M
    python benchmarks/anchors.py report benchmarks/results/anchors.json [MORE.json ...]

CPU: codl-tvm's CPU-only build against onnxruntime (CPU provider) and PyTorch eager, all with
``--threads`` workers. GPU (where CUDA is): codl-tvm's GPU-only build against PyTorch eager
(fp32: TF32 off) and its CUDA-graph build against PyTorch replaying a CUDA graph. Each phase
times its engines interleaved (round r starts at engine r mod n; per visit a warm-up call,
then ``--calls`` timed calls); a row's time is the median of its visits' medians, and ratios
compare engines of one run. Weights are drawn from ``--seed`` on the target
(``anchors_models``); every output is compared with onnxruntime's (max |a - b| / max |b|).
Rows merge into ``--json`` keyed by (model, processor, machine, anchor).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import anchors_models as am  # noqa: E402
from anchors_rows import KEY, merge, table  # noqa: E402
from quiet import quiesce  # noqa: E402

X86_CPU = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16}


def bar(items: Any, desc: str) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, file=sys.stdout, leave=False)


# ---- build (here) --------------------------------------------------------------------------
def build_model(name: str, args: argparse.Namespace, pair: Any, work: Path) -> dict[str, Any]:
    import onnx
    from onnx import external_data_helper as xd
    from onnx import numpy_helper

    import codl_tvm

    src = am.source_model(name, args.seed, work)
    sources = {k: v for k, v in am.draw(src["specs"], args.seed).items()
               if v.size >= am.MIN_SIZE}
    index, lits = am.ValueIndex(sources), {}
    proto = onnx.load(src["path"])
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    graph = am.graph_json(proto) if "zoo" in am.MODELS[name] else None  # for the replay
    final = Path(args.out) / name
    if final.exists() and not (final / "meta.json").is_file():
        raise SystemExit(f"{final} exists and is not an anchors build; choose another --out")
    out = final.with_name(f".{name}.partial")  # renamed into place when complete
    try:
        out.mkdir(parents=True)
    except FileExistsError:
        raise SystemExit(f"{out} is left from a build that did not finish; remove it") from None
    external, embedded, offset = [], {}, 0
    for t in proto.graph.initializer:
        a = inits[t.name]
        rec = index.find(a) if a.dtype == np.float32 and a.size >= am.MIN_SIZE else None
        if rec is None:
            embedded[t.name] = am.literal(lits, a)
            continue
        external.append({"name": t.name, "at": offset, **rec})
        t.CopyFrom(numpy_helper.from_array(a, t.name))  # raw_data, which set_external_data needs
        xd.set_external_data(t, "weights.bin", offset, a.nbytes)
        t.ClearField("raw_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        offset += -(-a.nbytes // 4096) * 4096
    (out / "model.onnx").write_bytes(proto.SerializeToString())
    meta = {"model": name, "seed": args.seed, "sources": src["specs"], "inputs": src["inputs"],
            "pair": pair.to_json(), "onnx": {"external": external, "embedded": embedded,
                                             "bytes": offset}, "codl": {}}
    mod, meta["codl_onnx"] = am.codl_module(src["path"], work)
    variants = {"cpu": ("cpu", False)} if pair.is_cpu_only else {
        "cpu": ("cpu", False), "gpu": ("gpu", False), "gpu-graph": ("gpu", True)}
    kernels = {name: None for name in variants}
    # the same build on other kernels: the CUDA-graph one (x86-cuda), the CPU-only one
    baselines = [("cpu-base", ("cpu", False), args.cpu_baseline_variant, "cpu_baseline_variant")]
    if not pair.is_cpu_only:
        baselines.append(("gpu-graph-base", ("gpu", True), args.baseline_variant,
                          "baseline_variant"))
    for base, build_as, given, key in baselines:
        if given:
            items = [kv for item in given for kv in item.split(",")]
            variants[base], kernels[base] = build_as, codl_tvm.KernelVariants.parse(items)
            meta[key] = ",".join(items)
    for variant, (place, graph_on) in variants.items():
        exe = codl_tvm.compile(mod, pair, codl_tvm.Plan.single(mod, place), cuda_graph=graph_on,
                               variants=kernels[variant])
        exe.export(out / variant, weights=False, overwrite=True)
        params = {k: v.numpy() if hasattr(v, "numpy") else np.asarray(v)
                  for k, v in exe.params.items()}
        recs, missing = am.recipes(params, index, lits)
        meta["codl"][variant] = {"params": recs, "missing": missing}
    meta["torch"] = torch_side(name, src, graph, inits, index, lits)
    np.savez_compressed(out / "literals.npz", **lits)
    (out / "meta.json").write_text(json.dumps(meta) + "\n")
    replace(out, final)
    return meta


def replace(new: Path, final: Path) -> None:
    """Move the complete build ``new`` to ``final``; an earlier build there (ours: it has a
    ``meta.json``) is removed only once the new one is in place."""
    old = final.with_name(f".{final.name}.old")
    if final.exists():
        final.rename(old)
    new.rename(final)
    if old.exists():
        shutil.rmtree(old)


def torch_side(name: str, src: dict, graph: dict, inits: dict, index: Any, lits: dict) -> dict:
    """How the target builds the PyTorch anchor: torchvision's module and its state recipes,
    or the ONNX graph replayed (a zoo twin whose outputs differ falls back to the replay)."""
    info = am.MODELS[name]
    state = src["state"]
    if info["torch"] == "twin":
        try:
            state = am.twin_state(info["tv"], graph, inits)
            err = am.twin_error(info["tv"], state, src)
            if err > 1e-4:
                raise ValueError(f"torchvision twin differs from the ONNX model ({err:.1e})")
        except (ImportError, ValueError) as e:
            print(f"{name}: {e}; PyTorch anchor: ONNX graph replay", flush=True)
            state = None
    if state is None:
        return {"kind": "replay", "graph": graph}
    recs, missing = am.recipes(state, index, lits)
    return {"kind": "torchvision", "ctor": info["tv"], "state": recs, "missing": missing,
            **({"graph": graph} if "zoo" in info else {})}  # replayed without torchvision


def build(args: argparse.Namespace) -> int:
    import codl_tvm

    if args.pair == "x86-cuda":
        pair = codl_tvm.DevicePair("x86-cuda", X86_CPU | {"num-cores": args.num_cores},
                                   {"kind": "cuda", "arch": args.arch})
    else:
        pair = codl_tvm.DevicePair.preset(args.pair, num_cores=args.num_cores)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        for name in bar(args.models.split(","), "build"):
            t0 = time.time()
            meta = build_model(name, args, pair, Path(work))
            miss = {v: c["missing"] for v, c in meta["codl"].items() if c["missing"]}
            print(f"{name}: {time.time() - t0:.0f} s, codl from {meta['codl_onnx']}, torch "
                  f"{meta['torch']['kind']}{f', not views: {miss}' if miss else ''}", flush=True)
    size = sum(f.stat().st_size for f in Path(args.out).rglob("*") if f.is_file())
    print(f"wrote {args.out} ({size / 2**20:.1f} MiB)")
    if args.pack:  # what travels: unpack with tar xzf PACK -C DIR, run DIR/<out's name>
        import tarfile

        with tarfile.open(args.pack, "w:gz") as tar:
            tar.add(args.out, arcname=Path(args.out).name)
        print(f"packed {args.pack} ({Path(args.pack).stat().st_size / 2**20:.1f} MiB)")
    return 0


# ---- run (there) ---------------------------------------------------------------------------
def interleaved(calls: dict[str, Any], args: argparse.Namespace) -> dict[str, dict]:
    """Median seconds per engine over interleaved visits; rounds and calls capped so the
    phase keeps to ``--budget-s`` (at least ``--min-rounds`` visits each). Each visit
    starts with the other engines' threads idle (:func:`quiesce`)."""
    est = {}
    for n, fn in calls.items():
        t = time.perf_counter()
        fn()
        est[n] = time.perf_counter() - t
    per = {n: (args.calls if t < 0.2 else 1) for n, t in est.items()}
    warm = {n: t < 0.5 for n, t in est.items()}
    cost = sum(est[n] * (per[n] + warm[n]) for n in calls) + 0.25 * len(calls)  # + quiesce
    rounds = max(args.min_rounds, min(args.rounds, int(args.budget_s / max(cost, 1e-9))))
    names, visits = list(calls), {n: [] for n in calls}
    for r in bar(range(rounds), "rounds"):
        for n in names[r % len(names):] + names[:r % len(names)]:
            quiesce()
            if warm[n]:
                calls[n]()
            ts = []
            for _ in range(per[n]):
                t = time.perf_counter()
                calls[n]()
                ts.append(time.perf_counter() - t)
            visits[n].append(float(np.median(ts)))
    return {n: {"ms": float(np.median(v)) * 1e3, "rounds": rounds, "calls": per[n]}
            for n, v in visits.items()}


def reason(e: Exception) -> str:
    if isinstance(e, ImportError):
        return f"skipped: {e.name or e} not importable here"
    return f"skipped: {type(e).__name__}: {str(e)[:200]}"


def run_model(folder: Path, args: argparse.Namespace, gpu: bool) -> list[dict]:
    meta, lits, sources, inputs = am.seeded(folder, args.seed)
    model = meta["model"]
    eng, skip = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            sess = am.ort_session(folder, meta, sources, args.threads, Path(tmp))
            eng["onnxruntime"] = ((lambda: sess.run(None, inputs)), sess.run(None, inputs))
        except Exception as e:  # noqa: BLE001 - a missing engine is a row saying why
            skip["onnxruntime"] = reason(e)
    for variant in meta["codl"]:
        if not variant.startswith("cpu") and not gpu:
            continue
        try:
            eng[f"codl-{variant}"] = am.codl_engine(folder, meta, variant, sources, lits, inputs)
        except Exception as e:  # noqa: BLE001
            skip[f"codl-{variant}"] = reason(e)
    impl = meta["torch"]["kind"]
    try:
        make, impl = am.torch_modules(meta, sources, lits)
        eng |= am.torch_engines(make, inputs, gpu)
    except Exception as e:  # noqa: BLE001 - torchvision missing, an op the replay lacks
        for n in ("torch-cpu", "torch-cuda", "torch-graph"):
            skip[n] = reason(e)
    ref = eng.get("onnxruntime", (None, None))[1]
    err = {n: am.outputs_err([np.asarray(o.cpu() if hasattr(o, "cpu") else o) for o in got], ref)
           for n, (_, got) in eng.items() if ref is not None}
    miss = {n: c["missing"] for n, c in meta["codl"].items() if c["missing"]}
    cpu = interleaved({n: eng[n][0] for n in ("codl-cpu", "onnxruntime", "torch-cpu",
                                               "codl-cpu-base") if n in eng}, args)
    gpu_t = interleaved({n: eng[n][0] for n in ("codl-gpu", "codl-gpu-graph", "torch-cuda",
                                                 "torch-graph", "codl-gpu-graph-base")
                         if n in eng}, args) if gpu else {}
    base = {"model": model, "machine": args.machine, "threads": args.threads,
            "load1": round(os.getloadavg()[0], 2), "omp_wait_policy": os.environ.get(
                "OMP_WAIT_POLICY", "default"), **args.devices,
            "torch": impl, "codl_onnx": meta["codl_onnx"]}
    pairs = [("cpu", "codl-cpu", "onnxruntime", "onnxruntime", cpu),
             ("cpu", "codl-cpu", "torch-cpu", "torch-eager", cpu)]
    if "cpu-base" in meta["codl"]:  # the default kernels against a baseline's
        pairs.append(("cpu", "codl-cpu", "codl-cpu-base",
                      f"codl[{meta['cpu_baseline_variant']}]", cpu))
    if gpu:
        pairs += [("gpu", "codl-gpu", "torch-cuda", "torch-eager", gpu_t),
                  ("gpu", "codl-gpu-graph", "torch-graph", "torch-cudagraph", gpu_t)]
        if "gpu-graph-base" in meta["codl"]:  # the default kernels against a baseline's
            pairs.append(("gpu", "codl-gpu-graph", "codl-gpu-graph-base",
                          f"codl-cudagraph[{meta['baseline_variant']}]", gpu_t))
    rows = []
    for proc, codl, anchor, label, times in pairs:
        row = base | {"processor": proc, "anchor": label, "codl_build": codl}
        row |= {"codl_ms": times.get(codl, {}).get("ms"), "anchor_ms":
                times.get(anchor, {}).get("ms"), "rel_err": err.get(codl),
                "anchor_rel_err": err.get(anchor)}
        row |= {"rounds": (times.get(codl) or times.get(anchor) or {}).get("rounds"),
                "calls": [times.get(n, {}).get("calls") for n in (codl, anchor)]}
        why = [skip[n] for n in (codl, anchor) if n in skip]
        if why:
            row["skipped"] = "; ".join(why)
        if miss.get(codl.removeprefix("codl-")):
            row["note"] = "codl weights not views of the sources: outputs not comparable"
        rows.append(row)
    return rows


def run(args: argparse.Namespace) -> int:
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM's pool exists
    sys.path[:0] = [args.torchvision_path] if args.torchvision_path else []
    if args.omp_passive:  # before torch loads OpenMP: its workers sleep when idle
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    warnings.filterwarnings("ignore")
    try:
        import torch
    except ModuleNotFoundError:  # its anchors are skipped (rows say why)
        torch = None
        print("no PyTorch here: only onnxruntime is timed beside codl-tvm", file=sys.stderr)
    if torch is not None:
        torch.set_num_threads(args.threads)
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    from codl_tvm import runtime

    root = Path(args.artifacts)
    folders = [root / m for m in (args.models.split(",") if args.models else sorted(
        p.name for p in root.iterdir() if (p / "meta.json").exists()))]
    cuda = any(json.loads((f / "meta.json").read_text())["pair"]["gpu"]["kind"] == "cuda"
               for f in folders)
    gpu = cuda and torch is not None and torch.cuda.is_available() and runtime.enable_cuda()
    args.devices = {"cpu_name": am.cpu_name()} | (
        {"gpu_name": torch.cuda.get_device_name(0)} if gpu else {})
    if cuda and gpu and args.warm_jobs > 1:
        from codl_tvm.planner.bundle import warm_artifacts

        os.environ.setdefault("CODL_CUDA_CACHE", "/tmp/codl-nvcc-cache")
        warm_artifacts([f / v for f in folders for v in ("gpu", "gpu-graph")
                        if (f / v).exists()], args.warm_jobs)
    start = time.time()
    for folder in bar(folders, "models"):
        if time.time() - start > args.deadline_s:
            rows = [{"model": folder.name, "machine": args.machine, "processor": p,
                     "anchor": a, "skipped": "skipped: deadline"} for p, a in
                    [("cpu", "onnxruntime"), ("cpu", "torch-eager")]]
        else:
            rows = run_model(folder, args, gpu)
        merge(args.json, rows)
        print("\n" + table(rows), flush=True)
        gc.collect()
    return 0


# ---- results -------------------------------------------------------------------------------
def report(args: argparse.Namespace) -> int:
    rows: list[dict] = []
    for path in args.files:
        rows = list({tuple(r.get(k) for k in KEY): r for r in rows + json.loads(
            Path(path).read_text())["rows"]}.values())
    if args.output:
        merge(args.output, rows)
    print(table(rows))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile codl-tvm artifacts, write weightless models")
    b.add_argument("--out", default=".devcarry/anchors")
    b.add_argument("--pair", default="cpu-pair", choices=["cpu-pair", "x86-cuda"])
    b.add_argument("--arch", default="sm_90", help="x86-cuda: the GPU's arch")
    b.add_argument("--num-cores", type=int, help="the CPU target's cores (x86-cuda: 16)")
    b.add_argument("--models", default=",".join(am.MODELS))
    b.add_argument("--seed", type=int, default=0, help="the source tensors' seed")
    b.add_argument("--pack", help="also write this .tgz of --out (what travels)")
    b.add_argument("--baseline-variant", action="append", metavar="KEY=VALUE",
                   help="x86-cuda: also build the CUDA-graph model with these kernel variants "
                        "(e.g. gpu_matmul=dlight), timed beside the default build")
    b.add_argument("--cpu-baseline-variant", action="append", metavar="KEY=VALUE",
                   help="also build the CPU-only model with these kernel variants (e.g. "
                        "cpu_prepack=off), timed beside the default build")
    r = sub.add_parser("run", help="time every engine on this machine")
    r.add_argument("artifacts")
    r.add_argument("--json", required=True, help="rows merge into this file")
    r.add_argument("--threads", type=int, required=True, help="CPU workers of every engine")
    r.add_argument("--machine", default=platform.node())
    r.add_argument("--models", help="comma-separated (default: all in the folder)")
    r.add_argument("--rounds", type=int, default=9)
    r.add_argument("--min-rounds", type=int, default=3)
    r.add_argument("--calls", type=int, default=5, help="timed calls per visit")
    r.add_argument("--budget-s", type=float, default=60, help="per model and processor")
    r.add_argument("--deadline-s", type=float, default=1e9, help="start no model after it")
    r.add_argument("--warm-jobs", type=int, default=8, help="processes running nvcc first")
    r.add_argument("--seed", type=int, default=0, help="the inputs' seed")
    r.add_argument("--omp-passive", action="store_true", help="OMP_WAIT_POLICY=PASSIVE for "
                   "PyTorch: on a host shared with other work, OpenMP's spinning workers wait "
                   "for a descheduled one (ResNet-50: 2.6 s instead of 61 ms on 2 shared cores)")
    r.add_argument("--torchvision-path", help="a folder holding torchvision (a carried wheel "
                   "unpacked there); without torchvision, zoo models' anchors are replays")
    t = sub.add_parser("report", help="merge result files, print the table")
    t.add_argument("files", nargs="+")
    t.add_argument("-o", "--output", help="write the merged rows here")
    args = p.parse_args()
    if args.cmd == "build" and args.num_cores is None and args.pair == "x86-cuda":
        args.num_cores = 16
    return {"build": build, "run": run, "report": report}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
