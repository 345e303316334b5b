"""Tutorial 3: plan a zoo model, benchmark the plan, and explain it.

A predictor (tutorial 2) lets the planner search each op's split dimension and ratio and the
operator chains (CoDL's Algorithm 1); ``bench`` compiles the plans side by side and times them;
``explain`` shows, op by op, where each op runs, why, and the timeline of both processors.

Run it::

    python tutorials/03_plan_bench_explain.py --quick

It calls the same entry point as the shell commands::

    codl-tvm plan tiny-cnn --pair cpu-pair --predictor predictor.json -o plan.json
    codl-tvm bench tiny-cnn --pair cpu-pair --predictor predictor.json --plans gpu-only,codl
    codl-tvm explain tiny-cnn --pair cpu-pair --plan plan.json --predictor predictor.json \\
        --png timeline.png
"""

# %%
# Setup: a working folder and a predictor of the pair, trained on measurements of the model's
# own ops (tutorial 2 explains this step).
import argparse
import tempfile
from pathlib import Path

import codl_tvm
from codl_tvm import predictor, profiler, zoo
from codl_tvm.cli import main as codl_tvm_cli
from codl_tvm.explain import model_op_specs
from codl_tvm.profiler import machine_facts, space

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--pair", default="cpu-pair")
parser.add_argument("--model", default="tiny-cnn", help="a zoo model name or an ONNX file")
parser.add_argument("--quick", action="store_true", help="few timing rounds")
parser.add_argument("--out", default=None, help="working folder (default: a temporary one)")
args = parser.parse_args()
out = Path(args.out or tempfile.mkdtemp(prefix="codl-tutorial3-"))


def codl_tvm_command(*argv: str) -> None:
    """``codl-tvm ARGV...``, in this process; stops the tutorial on an error."""
    argv = tuple(str(a) for a in argv)
    print(f"\n$ codl-tvm {' '.join(argv)}")
    code = codl_tvm_cli(list(argv))
    if code != 0:
        raise SystemExit(f"codl-tvm {argv[0]} failed with exit code {code}")


model = args.model  # plan, bench and explain take zoo names and ONNX files alike
onnx_file = zoo.get(model) if model in zoo.list_models() else model
samples, pred = out / "samples.csv", out / "predictor.json"
specs = model_op_specs(codl_tvm.load_model(onnx_file), args.model)
jobs = space.compute_jobs(specs, (0.3, 0.6, 1.0))
profiler.profile(args.pair, samples, jobs=jobs + space.sharing_jobs(4, 1 << 20), progress=False)
predictor.train(profiler.read_samples(samples), kind="codl", output=pred,
                machine=machine_facts.beside(samples), source=samples)

# %%
# Plan. The ``codl`` strategy searches per-op dims and ratios and chains with the predictor;
# other strategies (``codl-tvm plan --help``) are the papers' baselines.
plan = out / "plan.json"
codl_tvm_command("plan", model, "--pair", args.pair, "--predictor", pred, "-o", plan)

# %%
# Benchmark: compile the CoDL plan and the single-processor plans and time them, interleaved.
# On ``cpu-pair`` both "processors" share the same cores, so expect little gain here; on a real
# CPU+GPU pair (``x86-cuda``, ``android-opencl``) this is where co-execution pays off.
rounds = "3" if args.quick else "10"
codl_tvm_command("bench", model, "--pair", args.pair, "--predictor", pred,
                 "--plans", "gpu-only,cpu-only,codl", "--rounds", rounds,
                 "--json", out / "bench.json")

# %%
# Explain: the per-op table (dim, ratio, chain, predicted CPU / GPU / sharing time) and the
# timeline picture, beside the CPU-only and GPU-only timelines.
codl_tvm_command("explain", model, "--pair", args.pair, "--plan", plan, "--predictor", pred,
                 "--png", out / "timeline.png")
