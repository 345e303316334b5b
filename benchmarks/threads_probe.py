"""TVM's CPU thread count on the H100 host: the probe kernels under TVM's default pool (8
workers: half the 16 vCPUs, x86 hyper-threads ignored) and with TVM_NUM_THREADS=16, from one
device call, alternating default / 16 / default / 16 (6 visits each):

    # there (runtime-only TVM; carry .devcarry/tvm-runtime.tgz and .devcarry/probe7-bundle):
    #   source benchmarks/h100_env.sh; for t in default 16 default2 16b; do
    #     [ ${t:0:2} = 16 ] && export TVM_NUM_THREADS=16 || unset TVM_NUM_THREADS
    #     python3 codl_tvm/profiler/bundle_runner.py .devcarry/probe7-bundle \\
    #       -o $OUT/threads-$t.csv --rounds 6 --repeats 3 --min-repeat-ms 10; done
    python benchmarks/threads_probe.py benchmarks/results/threads-h100 [--json out.json]

Prints, per kernel, the median ratio default / 16 threads (> 1: 16 threads faster) and the
drift between the two default runs.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

KEY = ("algorithm", "OC", "dim", "sub_H", "sub_OC", "sub_pad_top")
RUNS = ("default", "16", "default2", "16b")


def _load(path: Path) -> dict[tuple, float]:
    with open(path, newline="") as f:
        return {tuple(r[k] for k in KEY): float(r["latency_us"]) for r in csv.DictReader(f)}


def summary(folder: Path) -> dict[str, dict[str, float]]:
    t = {run: _load(folder / f"threads-{run}.csv") for run in RUNS}
    out = {}
    for algo in sorted({k[0] for k in t["default"]}):
        keys = [k for k in t["default"] if k[0] == algo]
        ratio = [(t["default"][k] + t["default2"][k]) / (t["16"][k] + t["16b"][k]) for k in keys]
        drift = [t["default2"][k] / t["default"][k] for k in keys]
        out[algo] = {"n": len(keys), "default_over_16": float(np.median(ratio)),
                     "q25": float(np.percentile(ratio, 25)),
                     "q75": float(np.percentile(ratio, 75)),
                     "default_drift": float(np.median(drift))}  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    res = summary(args.folder)
    print("| CPU kernel | parts | default (8) / 16 threads, median (q25-q75) | default run 2 / 1 |")
    print("|---|---:|---:|---:|")
    for algo, r in res.items():
        print(f"| {algo} | {r['n']} | {r['default_over_16']:.2f} ({r['q25']:.2f}-{r['q75']:.2f})"
              f" | {r['default_drift']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
