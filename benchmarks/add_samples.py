"""Add samples measured on another lease of the target to a samples file, net of that lease's
speed.

The H100 machine's CPU runs up to 1.7x apart from lease to lease (PREDICTOR.md, session 6), so
new rows measured on another lease are only comparable with a control group measured in the
same call: rows of the file itself, re-measured, labelled ``model = control``. Each
processor's median ratio new / file over its controls is the lease's speed; the new rows'
times (``latency_us``, ``median_us``, ``spread_us``, every visit of ``round_us``) are divided
by it, the controls are dropped, and the rows are appended:

    python benchmarks/add_samples.py codl_tvm/data/samples-x86-cuda-h100.csv new.csv \
        -o codl_tvm/data/samples-x86-cuda-h100.csv [--json speed.json] [--only-new]

With ``--only-new`` the output holds the scaled new rows alone (a test set kept out of
training: session 9's deep-layer stratum).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm.profiler import read_samples  # noqa: E402
from codl_tvm.profiler.noise import same_kernel  # noqa: E402
from codl_tvm.profiler.schema import row_key  # noqa: E402

MIN_CONTROLS = 20  # per processor: a median over fewer rows moves by several percent
TIME_COLUMNS = ("latency_us", "median_us", "spread_us")


def lease_speed(samples: Path, new: Path) -> dict[str, dict[str, float]]:
    """Per processor: median, quartiles and count of new / file latency over the controls."""
    return lease_speed_rows(read_samples(samples), read_samples(new))


def lease_speed_rows(old_rows: list[dict], new_rows: list[dict]) -> dict[str, dict[str, float]]:
    """:func:`lease_speed` of rows already read (``new_rows``' controls against ``old_rows``)."""
    old = {row_key(r): r for r in old_rows}
    ratios: dict[str, list[float]] = {}
    for r in new_rows:
        o = old.get(row_key(r))
        if r["model"] == "control" and o is not None and same_kernel(r, o):
            ratios.setdefault(r["role"], []).append(r["latency_us"] / o["latency_us"])
    out = {}
    for role, v in ratios.items():
        q25, med, q75 = np.percentile(v, [25, 50, 75])
        out[role] = {"median": float(med), "q25": float(q25), "q75": float(q75), "n": len(v)}
    return out


def check_controls(speed: dict[str, dict[str, float]], roles: set[str], new: object) -> None:
    """Stop unless every processor of ``roles`` has :data:`MIN_CONTROLS` control rows."""
    short = sorted(r for r in roles if speed.get(r, {}).get("n", 0) < MIN_CONTROLS)
    if short:
        raise SystemExit(f"{new}: fewer than {MIN_CONTROLS} control rows on {short}; "
                         "measure rows of the samples file with model=control in the same call")


def scaled(row: dict[str, str], factor: float) -> dict[str, str]:
    out = dict(row)
    for col in TIME_COLUMNS:
        out[col] = f"{float(row[col]) / factor:.3f}"
    if row.get("round_us"):
        out["round_us"] = ";".join(f"{float(v) / factor:.3f}" for v in row["round_us"].split(";"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("samples", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--json", type=Path, help="write the lease's speed per processor here")
    ap.add_argument("--only-new", action="store_true",
                    help="write the scaled new rows alone (a test set kept out of training)")
    args = ap.parse_args(argv)
    speed = lease_speed(args.samples, args.new)
    with open(args.new, newline="") as f:
        added = [r for r in csv.DictReader(f) if r["model"] != "control"]
    check_controls(speed, {r["role"] for r in added}, args.new)
    with open(args.samples, newline="") as f:
        reader = csv.DictReader(f)
        columns, old = reader.fieldnames, list(reader)
    tmp = args.output.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(([] if args.only_new else old)
                    + [scaled(r, speed[r["role"]]["median"]) for r in added])
    read_samples(tmp)  # the result must load before it replaces anything
    tmp.replace(args.output)
    if args.json:
        args.json.write_text(json.dumps(speed, indent=1))
    print(json.dumps({"added": len(added), "speed": speed}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
