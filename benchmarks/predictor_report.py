"""Accuracy of the four predictors on one samples file: 30% held-out rows and held-out CNNs.

    python benchmarks/predictor_report.py SAMPLES.csv [--test-models YOLO-V2 ...] \
        [--json out.json] [--markdown out.md]

Trains codl / flops / eop / gbdt on 70% of the rows (seeded split) and reports +-10% accuracy
and MAPE per processor and op kind on the other 30%; with ``--test-models`` also trains on
every CNN but those (random and sharing rows included) and tests on them. Prints a table,
writes the full results as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from codl_tvm.predictor import KINDS, make
from codl_tvm.predictor.accuracy import report, split_models, split_rows
from codl_tvm.profiler import read_samples
from codl_tvm.profiler.noise import format_noise, noise_rows


def evaluate(train_rows: list[dict], test_rows: list[dict]) -> dict[str, dict]:
    out = {}
    for kind in KINDS:
        t0 = time.perf_counter()
        pred = make(kind).fit(train_rows)
        rep = report(pred, test_rows)
        rep["fit_s"] = time.perf_counter() - t0
        out[kind] = rep
    return out


def summary_table(title: str, results: dict[str, dict]) -> str:
    """Markdown: one line per predictor, acc10 / MAPE of all compute rows per processor."""
    lines = [
        f"**{title}**",
        "",
        "| predictor | size (bytes) | predict_op (us) | CPU acc10 | CPU MAPE | GPU acc10 "
        "| GPU MAPE |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, rep in results.items():
        cells = []
        for role in ("cpu", "gpu"):
            row = next(
                (r for r in rep["rows"] if r["processor"] == role and r["op"] == "all"), None
            )
            cells += [f"{row['acc10']:.1%}", f"{row['mape']:.1%}"] if row else ["-", "-"]
        lines.append(
            f"| {kind} | {rep['size_bytes']} | {rep['predict_us_per_op']:.1f} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def per_op_table(results: dict[str, dict]) -> str:
    """Markdown: acc10 per (processor, op) for every predictor (n from the first)."""
    kinds = list(results)
    first = results[kinds[0]]["rows"]
    lines = ["| processor | op | n | " + " | ".join(f"{k} acc10" for k in kinds) + " |",
             "|---|---|---|" + "---|" * len(kinds)]  # fmt: skip
    for i, r in enumerate(first):
        accs = [f"{results[k]['rows'][i]['acc10']:.0%}" for k in kinds]
        lines.append(f"| {r['processor']} | {r['op']} | {r['n']} | " + " | ".join(accs) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("samples")
    parser.add_argument("--test-models", nargs="*", default=[])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write all results here")
    parser.add_argument("--markdown", help="write the tables here")
    args = parser.parse_args(argv)
    rows = read_samples(args.samples)
    results = {"split30": evaluate(*split_rows(rows, 0.3, args.seed))}
    if args.test_models:
        results["heldout_models"] = evaluate(*split_models(rows, args.test_models))
    md = [f"samples: `{args.samples}` ({len(rows)} rows, pair {rows[0]['pair']})", ""]
    results["noise"] = noise_rows(rows)
    md += [format_noise(results["noise"]), ""]
    md += [summary_table("30% held-out samples", results["split30"]), ""]
    md += [per_op_table(results["split30"]), ""]
    if "heldout_models" in results:
        title = f"held-out CNNs ({', '.join(args.test_models)})"
        md += [summary_table(title, results["heldout_models"]), ""]
        md += [per_op_table(results["heldout_models"]), ""]
    text = "\n".join(md)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
