"""Does ``calibrate`` carry the shipped predictor to another lease of the H100 machine?

The CPU kernels of ``noise_probe.py`` were timed on three other leases than the one the
shipped samples come from (each device call may get another machine), and the extra probe of
session 6 (``results/noise-probe-h100/lease-d-t16.csv``) on a fourth. Per lease: rows of the
shipped samples with that lease's latency (the mean of the lower half of its visits), then
for 20 seeded halves: calibrate on one half, +-10% accuracy on the other, against the
uncalibrated predictor on the same half.

    python benchmarks/calibration_check.py [--json benchmarks/results/calibration-h100.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm.predictor import DATA_DIR, load  # noqa: E402
from codl_tvm.profiler import read_samples  # noqa: E402
from codl_tvm.profiler.rounds import sample_estimate  # noqa: E402
from codl_tvm.profiler.schema import row_key  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "noise-probe-h100"
LEASES = {  # lease: probe files of its 16-thread visits
    "A (probe modes)": ["probe-modes.jsonl.gz"],
    "B (thread settings)": ["probe-t16.jsonl.gz", "probe-t16pin0.jsonl.gz",
                            "probe-t15.jsonl.gz", "probe-t16nobind.jsonl.gz"],
}  # fmt: skip


def lease_rows(files: list[str], shipped: dict[str, dict]) -> list[dict]:
    """Shipped rows with this lease's latency, from the probe's per-visit records (the probe
    keys its kernels by the profiler's row key)."""
    visits: dict[str, list[float]] = {}
    for name in files:
        with gzip.open(RESULTS / name, "rt") as fh:
            for line in fh.read().splitlines()[1:]:
                v = json.loads(line)
                if v["mode"] == "fresh10":
                    visits.setdefault(v["key"], []).append(float(np.percentile(v["costs_us"], 25)))
    return [dict(shipped[k], latency_us=sample_estimate(v)) for k, v in visits.items()
            if k in shipped]  # fmt: skip


def check(rows: list[dict], seeds: int = 20) -> dict:
    pred = load(DATA_DIR / "predictor-x86-cuda.json")
    before, after = [], []
    for seed in range(seeds):
        idx = list(range(len(rows)))
        random.Random(seed).shuffle(idx)
        cal, test = [rows[i] for i in idx[::2]], [rows[i] for i in idx[1::2]]
        y = np.array([r["latency_us"] for r in test])
        pred.speed_ = {}
        before.append(float(np.mean(np.abs(pred.predict(test) / y - 1) <= 0.1)))
        pred.calibrate(cal)
        after.append(float(np.mean(np.abs(pred.predict(test) / y - 1) <= 0.1)))
    return {"rows": len(rows), "acc10_before": float(np.mean(before)),
            "acc10_after": float(np.mean(after)), "speed_cpu": pred.speed_.get("cpu")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    shipped = {"|".join(row_key(r)): r
               for r in read_samples(DATA_DIR / "samples-x86-cuda-h100.csv")}
    results = {name: check(lease_rows(files, shipped)) for name, files in LEASES.items()}
    d = read_samples(RESULTS / "lease-d-t16.csv")
    results["D (Winograd rows, 3->OC convs)"] = check(d)
    print("| lease | CPU kernels | acc10 uncalibrated | acc10 calibrated | CPU speed factor |")
    print("|---|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['rows']} | {r['acc10_before']:.1%} | {r['acc10_after']:.1%} | "
              f"{r['speed_cpu']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
