"""Whole zoo models on the real GPU give onnxruntime's answer, unsplit and split.

The CPU tests prove the partitions on the cpu-pair and build the CUDA kernels without running
them; this runs them. Models whose weights fit the 64 MiB carry, at small inputs:

    # here (full TVM + onnxruntime): artifacts with weights, inputs, onnxruntime's outputs
    python benchmarks/verify_models.py build -o .devcarry/verify
    # there (runtime-only TVM, CUDA):
    python benchmarks/verify_models.py run .devcarry/verify -o $OUT/verify-full.json
    # both configurations, as in benchmarks/results/: bash benchmarks/run_edge_h100.sh checks

``run`` prints one row per (model, plan): relative error against onnxruntime, against the
model's gpu-only run, and between runs (which must be identical); it exits 1 when any error is
over its bound.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CPU = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16}
GPU = {"kind": "cuda", "arch": "sm_90"}
ORT_TOL = 1e-4  # other kernels, other summation orders
SPLIT_TOL = 1e-5  # a split must give the unsplit answer
RERUNS = 5  # further runs that must repeat the first one bit for bit
# model -> (zoo kwargs, [(plan name, dim, ratio, chain)]); gpu-only is always built
CASES: dict[str, tuple[dict, list[tuple[str, str, float, bool]]]] = {
    # deconvs, and instance norms whose means are 1x1-output pools over 256-4096 elements
    "fast-style-transfer": (dict(input_shape=(64, 64)), [("H-0.5-chain", "H", 0.5, True),
                                                         ("H-0.8", "H", 0.8, False),
                                                         ("OC-0.75-chain", "OC", 0.75, True)]),
    "tiny-cnn": ({}, [("H-0.7-chain", "H", 0.7, True), ("H-0.5", "H", 0.5, False),
                      ("OC-0.75", "OC", 0.75, False)]),

    # parallel branches: the second of every group whole on the CPU, the rest on the GPU,
    # beside the GPU's (IssueGpuWorkFirst); and every op split beside them
    "inception-v3": (dict(input_shape=(75, 75), width=0.125),
                     [("branch-cpu", "branches", 0.0, False), ("OC-0.5", "OC", 0.5, False)]),
    "lstm": ({}, [("OC-0.5", "OC", 0.5, False)]),
    "gru": ({}, [("OC-0.5", "OC", 0.5, False)]),
}


def build(out: Path, pair_name: str, block_copies: bool | None = None,
          models: list[str] | None = None) -> int:
    import warnings

    import onnxruntime as ort

    import codl_tvm
    from codl_tvm import zoo

    pair = (codl_tvm.DevicePair("x86-cuda", CPU, GPU) if pair_name == "x86-cuda"
            else codl_tvm.DevicePair.preset(pair_name))
    index = []
    for model, (kw, splits) in CASES.items():
        if models and model not in models:
            continue
        path = zoo.get(model, **kw)
        mod = codl_tvm.load_model(path)
        inputs = zoo.sample_inputs(model, seed=0, **kw)
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (out / model).mkdir(parents=True, exist_ok=True)
        np.savez(out / model / "inputs.npz", **inputs)
        np.savez(out / model / "expected.npz",
                 **{f"output_{i}": o for i, o in enumerate(sess.run(None, inputs))})
        plans = {"gpu-only": None}
        plans.update({name: _plan(mod, d, r, c) for name, d, r, c in splits})
        for name, plan in plans.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # stated fallbacks
                codl_tvm.compile(mod, pair, plan, block_copies=block_copies).export(
                    out / model / name, overwrite=True)
            index.append({"model": model, "plan": name})
        print(f"{model}: {list(plans)}", flush=True)
    (out / "index.json").write_text(json.dumps(index, indent=1))
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote {out} ({size / 2**20:.1f} MiB)")
    return 0


def _plan(mod, dim: str, ratio: float, chain: bool):
    """A uniform split, or (``dim`` "branches") the second branch of every group of parallel
    branches whole on the CPU and everything else on the GPU."""
    from codl_tvm import Plan
    from codl_tvm.plan import OpPlacement
    from codl_tvm.planner.branches import parallel_branches
    from codl_tvm.planner.opgraph import build_graph

    if dim != "branches":
        return Plan.uniform(mod, dim, ratio, chain=chain)
    nodes = build_graph(mod).nodes
    ops = {n.op_id: OpPlacement("gpu") for n in nodes}
    for group in parallel_branches(nodes):
        ops |= {n.op_id: OpPlacement("cpu") for n in group[1]}
    return Plan(ops=ops)


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    if not np.issubdtype(want.dtype, np.floating):
        return 0.0 if np.array_equal(got, want) else 1.0
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def run(folder: Path, output: Path, jobs: int) -> int:
    from codl_tvm import runtime
    from codl_tvm.planner.bundle import warm_artifacts

    os.environ.setdefault("CODL_CUDA_CACHE", "/tmp/codl-nvcc-cache")
    index = json.loads((folder / "index.json").read_text())
    if jobs > 1:
        warm_artifacts([folder / e["model"] / e["plan"] for e in index], jobs)
    rows, unsplit = [], {}
    for entry in index:
        model, plan = entry["model"], entry["plan"]
        with np.load(folder / model / "inputs.npz") as f:
            inputs = {k: f[k] for k in f.files}
        with np.load(folder / model / "expected.npz") as f:
            expected = [f[f"output_{i}"] for i in range(len(f.files))]
        runner = runtime.load(folder / model / plan)
        outs = runner.run(inputs)
        # run after run: a copy still in flight when a kernel reads its buffer shows here
        again = max(max(_rel_err(o, p) for o, p in zip(runner.run(inputs), outs, strict=True))
                    for _ in range(RERUNS))
        unsplit.setdefault(model, outs)
        ort_err = max(_rel_err(o, e) for o, e in zip(outs, expected, strict=True))
        split_err = max(_rel_err(o, u) for o, u in zip(outs, unsplit[model], strict=True))
        ok = ort_err <= ORT_TOL and split_err <= SPLIT_TOL and again == 0.0
        rows.append({"model": model, "plan": plan, "vs_onnxruntime": ort_err,
                     "vs_gpu_only": split_err, "vs_itself": again, "ok": ok})
        print(f"{model:20s} {plan:12s} vs onnxruntime {ort_err:.2e}  vs gpu-only "
              f"{split_err:.2e}  run to run {again:.1e}  {'ok' if ok else 'WRONG'}", flush=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("-o", "--output", default=".devcarry/verify")
    b.add_argument("--pair", default="x86-cuda",
                   help="x86-cuda (the H100 machine) or a preset, e.g. cpu-pair to try it here")
    b.add_argument("--block-copies", action=argparse.BooleanOptionalAction, default=None,
                   help="splits with block copies or without (default: as compile does, with "
                        "them on CUDA; --no-block-copies: results/verify-{full,edge}.json)")
    b.add_argument("--models", default="", help=f"comma-separated, of {', '.join(CASES)} "
                                                "(default: all)")
    r = sub.add_parser("run")
    r.add_argument("folder")
    r.add_argument("-o", "--output", default=os.path.join(os.environ.get("OUT", "."),
                                                          "verify-full.json"))
    r.add_argument("--jobs", type=int, default=8, help="processes compiling CUDA first")
    args = p.parse_args()
    if args.cmd == "build":
        models = [m for m in args.models.split(",") if m]
        unknown = sorted(set(models) - set(CASES))
        if unknown:
            p.error(f"--models: no case for {', '.join(unknown)}; cases: {', '.join(CASES)}")
        return build(Path(args.output), args.pair, args.block_copies, models)
    return run(Path(args.folder), Path(args.output), args.jobs)


if __name__ == "__main__":
    sys.exit(main())
