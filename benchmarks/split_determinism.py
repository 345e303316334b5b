"""Split ops give the same output run after run on the real devices.

Each conv of a model is split alone (by default twice: output channels at GPU share 0.75,
and rows at 0.5; every other op on the GPU) and the artifact is run 8 times with one input;
every run must equal the first bit for bit. A copy still in flight when a kernel reads its
buffer shows up here as a difference; no weights are needed (artifacts carry none), so every
op of a full-size model can be checked.

    # here (full TVM)
    python benchmarks/split_determinism.py build --out .devcarry/determinism
    tar czf .devcarry/determinism.tgz -C .devcarry determinism
    # there (runtime-only TVM); the edge configuration through benchmarks/edge_gpu.sh
    python benchmarks/split_determinism.py run DIR -o determinism-full.json
    OUT=$OUT bash benchmarks/edge_gpu.sh 5 python benchmarks/split_determinism.py run DIR \\
        -o determinism-edge.json

``run`` exits 1 when any op differs between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODELS = ("resnet-18", "fast-style-transfer")
RUNS = 8
H100_CPU = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16}
H100_GPU = {"kind": "cuda", "arch": "sm_90"}


def build(args: argparse.Namespace) -> int:
    import codl_tvm
    from codl_tvm import zoo
    from codl_tvm.outputs import write_json
    from codl_tvm.plan import Plan

    pair = codl_tvm.DevicePair("x86-cuda", H100_CPU, H100_GPU)
    out, index = Path(args.out), []
    for model in args.models.split(","):
        mod = codl_tvm.load_model(zoo.get(model))
        for dim, _, ratio in (s.partition("@") for s in args.splits.split(",")):
            split = Plan.uniform(mod, dim, float(ratio))
            for op, placement in split.ops.items():
                if args.ops and not op.startswith(tuple(args.ops.split(","))):
                    continue
                plan = Plan.single(mod, "gpu")
                plan.ops[op] = placement
                name = f"{model}.{op}.{dim}{ratio}"
                exe = codl_tvm.compile(mod, pair, plan, block_copies=args.block_copies)
                if not exe.manifest["staging"]:  # the ratio leaves a device nothing
                    continue
                exe.export(out / name, weights=False, overwrite=True)
                index.append(name)
                print(name, flush=True)
    write_json(out / "index.json", index)
    return 0


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from codl_tvm import runtime
    from codl_tvm.outputs import write_json
    from codl_tvm.planner.bundle import warm_artifacts

    os.environ.setdefault("CODL_CUDA_CACHE", "/tmp/codl-nvcc-cache")
    folder = Path(args.artifacts)
    index = json.loads((folder / "index.json").read_text())
    warm_artifacts([folder / name for name in index], args.jobs)
    rows = []
    for name in index:
        runner = runtime.load(folder / name)
        x = runner.random_inputs(0)
        outs = [runner.run(x)[0] for _ in range(RUNS)]
        diff = max(float(np.linalg.norm(o - outs[0]) / max(np.linalg.norm(outs[0]), 1e-30))
                   for o in outs[1:])
        rows.append({"op": name, "max_rel_diff": diff})
        print(f"{name:40s} {diff:.2e}", flush=True)
    write_json(args.output, {"runs": RUNS, "rows": rows},
               dumps=lambda d: json.dumps(d, indent=1) + "\n")
    return 0 if all(r["max_rel_diff"] == 0.0 for r in rows) else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--models", default=",".join(MODELS))
    b.add_argument("--splits", default="OC@0.75,H@0.5", help="DIM@GPU_SHARE,...")
    b.add_argument("--ops", default="", help="only ops whose id starts so (e.g. matmul,conv2d_1)")
    b.add_argument("--out", default=".devcarry/determinism")
    b.add_argument("--block-copies", action=argparse.BooleanOptionalAction, default=None,
                   help="split with block copies or without (default: as compile does, with "
                        "them on CUDA; --no-block-copies: results/determinism-{full,edge}.json)")
    r = sub.add_parser("run")
    r.add_argument("artifacts")
    r.add_argument("-o", "--output", required=True)
    r.add_argument("--jobs", type=int, default=14, help="processes compiling CUDA first")
    args = p.parse_args()
    return build(args) if args.cmd == "build" else run(args)


if __name__ == "__main__":
    sys.exit(main())
