"""Tutorial 2: profile a device pair and train a latency predictor.

The planner decides what to split from predicted latencies: each processor's kernel time for
its part of an op, and the cost of sharing data between them (CoDL Eq. 2). A predictor learns
both from measurements of the pair.

Run it::

    python tutorials/02_profile_and_train.py --quick      # about a minute: this model's ops
    python tutorials/02_profile_and_train.py              # the profiler's quick random set

Shell twins: ``codl-tvm profile --pair P --quick -o samples.csv``, ``codl-tvm train
samples.csv -o predictor.json``, ``codl-tvm report predictor.json samples.csv``.
"""

# %%
# Setup.
import argparse
import tempfile
from pathlib import Path

import codl_tvm
from codl_tvm import predictor, profiler, zoo
from codl_tvm.explain import model_op_specs, op_spec

# import the function before the submodule of the same name shadows it on the package
from codl_tvm.predictor import report as accuracy_report
from codl_tvm.predictor.accuracy import format_table
from codl_tvm.profiler import machine_facts, space

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--pair", default="cpu-pair")
parser.add_argument("--quick", action="store_true", help="profile only tiny-cnn's own ops")
parser.add_argument("--out", default=None, help="working folder (default: a temporary one)")
args = parser.parse_args()
out = Path(args.out or tempfile.mkdtemp(prefix="codl-tutorial2-"))

# %%
# What to measure. A job is one sub-op (an op's GPU or CPU part at some share) or one sharing
# step (copy to/from the GPU, slice, concat). ``--quick`` measures the ops of the model we care
# about at a few shares; without it, the profiler's quick set of random ops in CoDL's ranges.
mod = codl_tvm.load_model(zoo.get("tiny-cnn"))
if args.quick:
    specs = model_op_specs(mod, "tiny-cnn")
    jobs = space.compute_jobs(specs, (0.3, 0.6, 1.0)) + space.sharing_jobs(4, 1 << 20)
else:
    jobs = profiler.make_jobs(quick=True)
print(f"{len(jobs)} jobs")

# %%
# Measure them on the pair. The samples file is CSV, appended as it goes, so an interrupted
# run resumes. ``rpc="host:port"`` measures on a remote device instead (tutorial 4).
samples = out / f"samples-{args.pair}.csv"
counts = profiler.profile(args.pair, samples, jobs=jobs, progress=not args.quick)
print(f"measured {counts['measured']} samples into {samples}")

# %%
# Train CoDL's predictor (Eq. 3: blocking counts times a learned per-block time, and linear
# sharing costs) on the sample rows and the machine facts the profiler wrote beside them,
# and save it: a small JSON file, never a pickle.
rows = profiler.read_samples(samples)
pred = predictor.train(rows, kind="codl", output=out / "predictor.json",
                       machine=machine_facts.beside(samples), source=samples)
print(f"predictor: {pred.kind} for {pred.pair_}, {pred.size_bytes} bytes")

# %%
# How good is it? The report gives the share of predictions within 10% and the mean error,
# per processor and op kind. (Here on its own training samples; hold some out in real use.)
print(format_table(accuracy_report(pred, rows)))

# %%
# Predict one op split 60/40 on output rows: each part's time, the sharing, and the total.
desc = codl_tvm.list_ops(mod)[2]
spec, _ = op_spec(desc)
for ratio in (0.0, 0.6, 1.0):
    t = pred.predict_op(spec, "H", ratio)
    print(f"{desc['id']} GPU share {ratio:.1f}: " + ", ".join(f"{k} {v:.1f}" for k, v in t.items()))
