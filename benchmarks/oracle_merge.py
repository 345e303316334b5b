"""One oracle samples file from two instances of the GPU machine: a run cut short by its
deadline, and the run that resumed it on another instance.

    python benchmarks/oracle_merge.py FIRST.csv RESUMED.csv -o oracle-edge.csv

FIRST holds every row the first run measured. The resumed run (``bundle_runner.py``) started
from FIRST with some of its rows taken out, so the second instance measured those again beside
the ones the first never reached. Instances of the GPU machine differ in CPU speed by up to
2.3x (BENCH.md), and an oracle mixing them would price some ops at one CPU's speed and the rest
at another's. The rows measured on both set the factor (second / first, each weighted by its
time, as ``codl-tvm calibrate`` weighs); the second instance's CPU kernel rows that FIRST lacks
are divided by it. GPU rows and copies are kept as measured; both roles' factors are printed.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm.outputs import write_text  # noqa: E402
from codl_tvm.predictor.fitting import time_weighted_median  # noqa: E402
from codl_tvm.predictor.opspec import SHARING_KINDS  # noqa: E402
from codl_tvm.profiler.schema import row_key  # noqa: E402

SCALED = ("latency_us", "median_us", "round_us")


def read(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def factors(first: dict[tuple, dict], resumed: list[dict]) -> dict[str, tuple[float, int]]:
    """Per role: second / first over the kernel rows measured on both (a row carried over
    from FIRST has FIRST's very figure, so it is not a second measurement)."""
    out = {}
    for role in ("cpu", "gpu"):
        pairs = [(float(r["latency_us"]), float(first[row_key(r)]["latency_us"]))
                 for r in resumed if r["role"] == role and r["op"] not in SHARING_KINDS
                 and row_key(r) in first
                 and r["latency_us"] != first[row_key(r)]["latency_us"]]
        if pairs:
            second, one = np.array(pairs).T
            out[role] = (time_weighted_median(second / one, one), len(pairs))
    return out


def merge(first_rows: list[dict], resumed: list[dict]) -> tuple[list[dict], dict]:
    first = {row_key(r): r for r in first_rows}
    fac = factors(first, resumed)
    cpu = fac.get("cpu", (1.0, 0))[0]
    rows = list(first_rows)
    for r in resumed:
        if row_key(r) in first:
            continue
        if r["role"] == "cpu" and r["op"] not in SHARING_KINDS:
            r = {**r, **{c: f"{float(r[c]) / cpu:.3f}" for c in SCALED if r.get(c)}}
        rows.append(r)
    return rows, fac


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("first")
    p.add_argument("resumed")
    p.add_argument("-o", "--output", required=True)
    args = p.parse_args()
    resumed = read(args.resumed)
    rows, fac = merge(read(args.first), resumed)
    for role, (f, n) in fac.items():
        print(f"{role}: second instance / first = {f:.3f} over {n} rows measured on both")
    text = io.StringIO()
    writer = csv.DictWriter(text, list(resumed[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(args.output, text.getvalue())
    print(f"wrote {args.output}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
