"""Samples of the CPU pool kernel codl-tvm now builds, picked from two runs of one device call.

Session 19 measured the padded CPU pools twice in one call: with every padded pool copying its
input rows per task (``padjoin``), and with the pad inlined, the kernel before (``padpoolold``).
The kernel kept (:func:`codl_tvm.tiling.pool_copies_rows`) copies rows only for max pools that
pad rows, so each row is taken from the run that built its kernel, both already scaled to the
samples file by their own controls (``add_samples.py --only-new``)::

    python benchmarks/padpool_pick.py benchmarks/results/padpool-h100/padjoin-samples.csv \\
        benchmarks/results/padpool-h100/padpoolold-samples.csv \\
        -o benchmarks/results/padpool-h100/padpool-samples.csv

Rows only the first file holds (the refetch probe's convs, measured in the same run) are left
out. It prints the copied kernel's time over the inlined one per group (``--json`` writes it).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm import tiling  # noqa: E402
from codl_tvm.profiler import read_samples  # noqa: E402
from codl_tvm.profiler.schema import KEY_COLUMNS  # noqa: E402


def copies_rows(row: dict[str, str]) -> bool:
    """Whether codl-tvm's CPU pool kernel for this sample row copies its padded rows."""
    pads = int(row["sub_pad_top"]) + int(row["sub_pad_bottom"])
    return tiling.pool_copies_rows(row["op"] == "pool_max", pads)


def _key(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row[c] for c in KEY_COLUMNS)


def _speed(pairs: list[tuple[dict[str, str], dict[str, str]]]) -> list[dict]:
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for new, old in pairs:
        pads = "rows" if int(new["sub_pad_top"]) + int(new["sub_pad_bottom"]) else "cols only"
        q = float(new["latency_us"]) / float(old["latency_us"])
        groups[(new["op"], f"stride {new['SH']}", pads)].append(q)
    return [{"op": op, "stride": st, "pads": pads, "n": len(v), "median": float(np.median(v)),
             "max": float(np.max(v)), "slower_5pct": int(np.sum(np.asarray(v) > 1.05))}
            for (op, st, pads), v in sorted(groups.items())]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("copied", type=Path, help="samples of the kernel copying rows")
    ap.add_argument("inlined", type=Path, help="samples of the kernel inlining the pad")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--json", type=Path, help="write the per-group speed table here")
    args = ap.parse_args(argv)
    with args.copied.open() as f:
        copied = list(csv.DictReader(f))
    with args.inlined.open() as f:
        inlined = {_key(r): r for r in csv.DictReader(f)}
    out, pairs = [], []
    for row in copied:
        old = inlined.get(_key(row))
        if old is None:
            continue
        pairs.append((row, old))
        out.append(row if copies_rows(row) else old)
    if len(pairs) < len(inlined):
        sys.exit(f"{args.copied}: {len(inlined) - len(pairs)} rows of {args.inlined} missing")
    tmp = args.output.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(copied[0]))
        w.writeheader()
        w.writerows(out)
    read_samples(tmp)  # the result must load before it replaces anything
    tmp.replace(args.output)
    table = _speed(pairs)
    print("| op | stride | pads | n | copied / inlined, median | max | > 1.05x |")
    print("|---|---|---|---:|---:|---:|---:|")
    for t in table:
        print(f"| {t['op']} | {t['stride']} | {t['pads']} | {t['n']} | {t['median']:.2f} | "
              f"{t['max']:.2f} | {t['slower_5pct']} |")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
