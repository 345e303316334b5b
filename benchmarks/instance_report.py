"""How the predictor does when its test rows are measured again, on another instance.

The H100 machine is a KVM guest whose CPU speed moves from instance to instance (up to 1.7x). A
predictor is trained on one instance's samples and used on later ones, so its accuracy on the
*same* test rows re-measured on another instance is the figure a user gets. Per processor the
other instance's rows are first put on the training instance's scale by the median
ratio of all the rows both measured (what ``codl-tvm calibrate`` does with a few controls)::

    python benchmarks/instance_report.py codl_tvm/data/samples-x86-cuda-h100.csv \
        benchmarks/results/cpu40-h100/cpu40-new.csv [--seeds 20] \
        [--json benchmarks/results/cpu40-h100/instance-report.json]

Printed per test set (the seeded 30% splits, each held-out CNN, the whole file in-sample):
acc10 against the training instance's rows, against the other instance's (calibrated and raw), and
``reproduce10``: the share of the test rows whose two instances agree within +-10% once
calibrated, the ceiling of any predictor trained on one instance and judged on the other.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm.predictor import make  # noqa: E402
from codl_tvm.predictor.accuracy import split_models, split_rows  # noqa: E402
from codl_tvm.predictor.opspec import SHARING_KINDS  # noqa: E402
from codl_tvm.profiler import read_samples  # noqa: E402
from codl_tvm.profiler.noise import instance_ratios, same_kernel  # noqa: E402
from codl_tvm.profiler.schema import row_key  # noqa: E402

HELD_OUT = ("YOLO-V2", "VGG-16", "POSENET")
Row = dict[str, Any]


def instance_factors(rows: list[Row], other: dict[tuple, Row]) -> dict[str, float]:
    """Per processor, the median of the other instance's latency over this one's (shared rows)."""
    ratios = instance_ratios(rows, other, "role")
    del ratios["*"]
    return {role: float(np.median(v)) for role, v in ratios.items()}


def _scores(pred: Any, test: list[Row], other: dict[tuple, Row], factors: dict[str, float],
            role: str) -> dict[str, float]:
    """acc10 of ``pred`` on ``role``'s compute rows of ``test`` that the other instance measured,
    against both instances' latencies, and the two instances' own agreement."""
    test = [r for r in test if r["role"] == role and r["op"] not in SHARING_KINDS
            and row_key(r) in other]  # fmt: skip
    if not test:  # the other instance measured none of this set's rows
        return dict.fromkeys(("this_instance", "other_calibrated", "other_raw", "reproduce10"),
                             None) | {"n": 0}
    p = np.asarray(pred.predict(test))
    here = np.array([r["latency_us"] for r in test])
    there = np.array([other[row_key(r)]["latency_us"] for r in test])
    calibrated = there / factors[role]

    def acc10(y: np.ndarray) -> float:
        return float(np.mean(np.abs(p / y - 1) <= 0.1))

    return {"n": len(test), "this_instance": acc10(here), "other_calibrated": acc10(calibrated),
            "other_raw": acc10(there),
            "reproduce10": float(np.mean(np.abs(calibrated / here - 1) <= 0.1))}  # fmt: skip


def report(rows: list[Row], other_rows: list[Row], seeds: int, role: str = "cpu"
           ) -> dict[str, Any]:
    """The scores of :func:`_scores` on the seeded splits (mean), each held-out CNN and the
    whole file in-sample, with the instance factors."""
    # a row the other instance measured with a kernel that no longer runs it is left out (the
    # stride-1 1x1 convs it timed with the direct conv run the 1x1 GEMM now)
    mine = {row_key(r): r for r in rows}
    other = {k: r for r in other_rows
             if (k := row_key(r)) in mine and same_kernel(mine[k], r)}  # fmt: skip
    factors = instance_factors(rows, other)

    def fit(train: list[Row]) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make("codl").fit(train)

    def scored(train: list[Row], test: list[Row]) -> dict[str, float]:
        return _scores(fit(train), test, other, factors, role)

    splits = [scored(*split_rows(rows, 0.3, s)) for s in range(seeds)]
    sets = {f"30% split, mean of {seeds} seeds": _mean(splits)}
    for model in HELD_OUT:
        sets[f"held-out {model}"] = scored(*split_models(rows, [model]))
    sets["whole file, in-sample"] = scored(rows, rows)
    return {"processor": role, "instance_factors": factors, "sets": sets}


def _mean(scores: list[dict[str, Any]]) -> dict[str, Any]:
    """Each score's mean over the splits that have rows the other instance measured."""
    have = [s for s in scores if s["n"]]
    return {k: float(np.mean([s[k] for s in have])) if have else None for k in scores[0]}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def print_report(rep: dict[str, Any]) -> None:
    f = ", ".join(f"{k} {v:.3f}" for k, v in rep["instance_factors"].items())
    print(f"other instance / this instance (median): {f}\n")
    print(f"| {rep['processor']} test set | rows | this instance | other instance, calibrated | "
          "other instance, raw | instances agree (reproduce10) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, s in rep["sets"].items():
        cells = [_pct(s[k]) for k in ("this_instance", "other_calibrated", "other_raw",
                                      "reproduce10")]  # fmt: skip
        print(f"| {name} | {s['n'] or 0:.0f} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("samples", type=Path, help="the training instance's samples")
    ap.add_argument("other", type=Path, help="rows of it measured again on another instance")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--processor", default="cpu")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rep = report(read_samples(args.samples), read_samples(args.other), args.seeds,
                 args.processor)
    print_report(rep)
    if args.json:
        args.json.write_text(json.dumps(rep, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
