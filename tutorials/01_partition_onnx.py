"""Tutorial 1: partition an ONNX model and run it on a CPU and a GPU at once.

You have an ONNX file and a device pair. codl-tvm splits each convolution, pooling and dense
layer into a GPU part and a CPU part (along output rows ``H`` or output channels ``OC``),
runs both parts concurrently and joins them; the answer stays the unsplit model's.

Run it::

    python tutorials/01_partition_onnx.py --pair cpu-pair

``cpu-pair`` runs anywhere (both "devices" are the CPU); use ``x86-cuda`` on a machine with an
NVIDIA GPU. Every step here has a command-line twin, shown in the comments.
"""

# %%
# Setup: an ONNX file. Here the zoo's tiny CNN; any ONNX file with static shapes works the same.
import argparse
import tempfile
from pathlib import Path

import numpy as np

import codl_tvm
from codl_tvm import runtime, zoo
from codl_tvm.explain import format_table, plan_rows

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--pair", default="cpu-pair")
parser.add_argument("--quick", action="store_true", help="fewer timing repeats")
parser.add_argument("--out", default=None, help="working folder (default: a temporary one)")
args = parser.parse_args()
out = Path(args.out or tempfile.mkdtemp(prefix="codl-tutorial1-"))
onnx_path = zoo.get("tiny-cnn")  # or your own "model.onnx"
print(f"model: {onnx_path}")

# %%
# Load it. The input shape comes from the file; ``shape={"input": [4, 3, 32, 32]}`` would
# override it (batch 4). The partitionable ops get stable ids: conv2d_0, max_pool2d_0, ...
mod = codl_tvm.load_model(onnx_path)
for op in codl_tvm.list_ops(mod):
    print(f"{op['id']:14} {op['kind']:11} in {op['in']} -> out {op['out']}")

# %%
# A plan says where each op runs. ``Plan.uniform`` splits every op along output rows, the GPU
# taking 60% of them; ``chain=True`` lets consecutive ops keep their split so data crosses
# between the processors only at a chain's ends. Plans are JSON files you can edit.
plan = codl_tvm.Plan.uniform(mod, dim="H", ratio=0.6, chain=True)
plan.save(out / "plan.json")
print(format_table(plan_rows(mod, plan), ["op", "place", "dim", "ratio", "chain", "gpu", "cpu"]))

# %%
# Compile for the pair and run. ``codl-tvm compile MODEL --pair P --plan plan.json -o ART``
# does the same from the shell.
pair = codl_tvm.DevicePair.preset(args.pair)
split = codl_tvm.compile(mod, pair, plan)
inputs = split.random_inputs(seed=0)
(y_split,) = split.run(inputs)

# %%
# Check: the co-executed model gives the unsplit model's answer.
unsplit = codl_tvm.compile(mod, pair)  # no plan: the whole model on the GPU
(y_ref,) = unsplit.run(inputs)
rel_error = float(np.linalg.norm(y_split - y_ref) / np.linalg.norm(y_ref))
print(f"relative error vs unsplit: {rel_error:.2e}")
assert rel_error <= 1e-5, rel_error

# %%
# Export an artifact folder (library, weights, manifest) and run it with the runtime alone,
# as ``codl-tvm run ART --inputs x.npz -o y.npz`` would.
art = split.export(out / "tiny-cnn-artifact")
runner = runtime.load(art)
(y_art,) = runner.run(inputs)
assert np.allclose(y_art, y_split, rtol=1e-5, atol=1e-6)
repeat = 3 if args.quick else 20
print(f"artifact {art}: median {runner.time(inputs, repeat=repeat) * 1e3:.3f} ms "
      f"(untuned kernels on {pair.name}; see tutorial 3 for real comparisons)")
