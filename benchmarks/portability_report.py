"""Blind accuracy of predictors trained on quick profiles: one table per results folder.

Each ``QUICK.csv`` given is trained (``codl-tvm train``, the facts the profiler wrote beside it
included) and scored on each ``BLIND.csv`` (``codl-tvm report``): acc10 and MAPE per processor
and per kernel, beside each blind file's own agreement (twins10: two rows that measured one
sub-op, the ceiling of any predictor; agree10: single visits). Prints a table, writes JSON::

    python benchmarks/portability_report.py --quick old=quick-old.csv new=quick-final.csv \
        --blind blind1.csv blind2.csv -o report.json
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any

from codl_tvm.predictor import load, report, train
from codl_tvm.profiler import read_samples
from codl_tvm.profiler.machine_facts import beside
from codl_tvm.profiler.noise import noise_rows


def _ceiling(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    return {r["processor"]: {"agree10": r["agree10"], "twins10": r["twins10"]}
            for r in noise_rows(rows) if r["op"] == "all"}  # fmt: skip


def score(quick: dict[str, Path], blind: list[Path], shipped: Path | None) -> dict[str, Any]:
    predictors = {}
    for name, path in quick.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            predictors[name] = train(read_samples(path), machine=beside(path), source=path)
    if shipped is not None:
        predictors["shipped"] = load(shipped)
    out: dict[str, Any] = {"blind": {}, "rows": []}
    for path in blind:
        rows = read_samples(path)
        out["blind"][path.stem] = {"rows": len(rows), "ceiling": _ceiling(rows)}
        for name, pred in predictors.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rep = report(pred, rows)
            for r in rep["rows"]:
                if r["op"] == "all":
                    out["rows"].append({"predictor": name, "blind": path.stem, "algorithm": "all",
                                        **{k: r[k] for k in ("processor", "n", "acc10", "mape",
                                                             "median_ratio")}})  # fmt: skip
            out["rows"] += [{"predictor": name, "blind": path.stem,
                             **{k: k_[k] for k in ("processor", "algorithm", "n", "acc10", "mape",
                                                   "median_ratio")}}
                            for k_ in rep["kernels"]]  # fmt: skip
    return out


def table(rep: dict[str, Any]) -> str:
    lines = ["| blind | predictor | processor | kernel | n | acc10 | MAPE | meas/pred |",
             "|---|---|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for r in rep["rows"]:
        lines.append(f"| {r['blind']} | {r['predictor']} | {r['processor']} | {r['algorithm']} "
                     f"| {r['n']} | {100 * r['acc10']:.1f}% | {100 * r['mape']:.0f}% "
                     f"| {r['median_ratio']:.2f} |")
    for name, b in rep["blind"].items():
        for proc, c in b["ceiling"].items():
            lines.append(f"\n{name} {proc}: agree10 {_pct(c['agree10'])}, "
                         f"twins10 {_pct(c['twins10'])} (the measurement's own agreement)")
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", nargs="+", required=True, metavar="NAME=CSV",
                        help="quick-profile samples to train on, each with a name")
    parser.add_argument("--blind", nargs="+", required=True, type=Path, metavar="CSV",
                        help="blind samples (shapes no training row and no design choice used)")
    parser.add_argument("--shipped", type=Path, help="also score this predictor JSON")
    parser.add_argument("-o", "--output", type=Path, help="report JSON (a new file)")
    args = parser.parse_args()
    quick = dict(item.split("=", 1) for item in args.quick)
    rep = score({k: Path(v) for k, v in quick.items()}, args.blind, args.shipped)
    print(table(rep))
    if args.output is not None:
        with args.output.open("x") as f:  # never over an existing file
            json.dump(rep, f, indent=1)


if __name__ == "__main__":
    main()
