"""Summarise `run_noise_threads_h100.sh`: CPU round agreement and speed per thread setting.

    python benchmarks/noise_threads.py benchmarks/results/noise-threads-h100 \
        [--json benchmarks/results/noise-threads-h100.json]

For each ``noise-tT-bB.csv[.gz]`` (TVM_NUM_THREADS=T, TVM_BIND_THREADS=B): the share of pairs
of visits of one CPU sample within +-10% of each other (the ceiling of any predictor), the
median spread, and the median latency relative to the first setting on the samples both
measured. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm.profiler import read_samples  # noqa: E402
from codl_tvm.profiler.noise import noise_rows  # noqa: E402

KEY = ("op", "sub_H", "sub_W", "sub_IC", "sub_OC", "KH", "KW", "SH", "dim", "ratio")


def _read(path: Path) -> list[dict]:
    if path.suffix != ".gz":
        return read_samples(path)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / path.stem
        with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
        return read_samples(plain)


def summarise(folder: Path) -> list[dict]:
    files = sorted(folder.glob("noise-t*-b*.csv*"),
                   key=lambda p: [-int(x) for x in re.findall(r"\d+", p.name)])
    if not files:
        raise SystemExit(f"{folder}: no noise-tT-bB.csv[.gz] files (run_noise_threads_h100.sh)")
    runs = {f: _read(f) for f in files}
    base = {tuple(r[k] for k in KEY): r["latency_us"] for r in runs[files[0]]}
    out = []
    for f, rows in runs.items():
        t, b = re.findall(r"noise-t(\d+)-b(\d+)", f.name)[0]
        cpu = next(r for r in noise_rows(rows) if r["processor"] == "cpu" and r["op"] == "all")
        ratio = [r["latency_us"] / base[k] for r in rows
                 if (k := tuple(r[c] for c in KEY)) in base]
        out.append({"threads": int(t), "bind": int(b), "samples": cpu["samples"],
                    "pairs": cpu["pairs"], "agree10": cpu["agree10"],
                    "median_spread": cpu["median_range"],
                    "time_vs_first": float(np.median(ratio)), "compared": len(ratio)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = summarise(args.folder)
    print("| threads | bound | samples (pairs) | agree +-10% | median spread | time vs first |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['threads']} | {'yes' if r['bind'] else 'no'} | {r['samples']} "
              f"({r['pairs']}) | {r['agree10']:.1%} | {r['median_spread']:.1%} | "
              f"{r['time_vs_first']:.3f} ({r['compared']} samples) |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
