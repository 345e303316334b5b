"""How a predictor does on random strata it was not trained on, kernel by kernel.

    python benchmarks/strata_report.py codl_tvm/data/predictor-x86-cuda.json \
        body=benchmarks/results/body-h100/body-samples.csv \
        pointwise=benchmarks/results/pointwise-h100/pointwise-samples.csv \
        --planes probe=benchmarks/results/probe-h100/probe.csv \
        --json benchmarks/results/strata-h100.json

For each test set and (processor, kernel, 1x1 or KxK): the rows, the predictor's +-10%
accuracy on them, its median predicted / measured latency, and ``halves10`` (odd and even
visits of a row agree within +-10%: what the measurement itself reproduces). ``--planes``
adds the CPU direct 1x1 conv's time per FMA (stride 1, IC >= 64) by the bytes of one padded
input-channel plane, the step session 10's probe found around YOLO-V2's shapes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm.predictor import load  # noqa: E402
from codl_tvm.predictor.base import sub_spec  # noqa: E402
from codl_tvm.profiler import read_samples  # noqa: E402
from codl_tvm.profiler.noise import _halves_agree  # noqa: E402

PLANE_BINS_KB = ((0, 16), (16, 32), (32, 48), (48, 64), (64, 128), (128, 10**6))
XT = 14  # output columns of the direct conv's register tile on AVX-512 (whole tiles padded)


def test_rows(path: Path) -> list[dict[str, Any]]:
    """The compute rows of a stratum file, its lease's control rows left out."""
    return [r for r in read_samples(path) if r["model"] != "control" and r["algorithm"] != "copy"]


def kernel_rows(predictor: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (processor, kernel, k1|kn): n, acc10, median predicted / measured,
    halves10 (None where no row has 4 visits)."""
    q = np.asarray(predictor.predict(rows)) / np.array([r["latency_us"] for r in rows])
    groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r["role"], r["algorithm"], "k1" if r["KH"] * r["KW"] == 1 else "kn")].append(i)
    out = []
    for (role, algo, window), idx in sorted(groups.items()):
        agree = [_halves_agree(rows[i]["round_us"], 0.1) for i in idx]
        known = [a for a in agree if a is not None]
        out.append({"processor": role, "kernel": algo, "window": window, "n": len(idx),
                    "acc10": float(np.mean(np.abs(q[idx] - 1) <= 0.1)),
                    "median_ratio": float(np.median(q[idx])),
                    "halves10": float(np.mean(known)) if known else None})  # fmt: skip
    return out


def direct_1x1_by_plane(rows: list[dict[str, Any]]) -> dict[tuple[int, int], list[float]]:
    """ns per 1000 FMAs of the CPU direct 1x1 stride-1 sub-ops (IC >= 64), by the KB of one
    padded input plane (H rows of whole register tiles: what the hot loop strides by)."""
    out: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in rows:
        if (r["role"], r["algorithm"], r["KH"], r["SH"]) != ("cpu", "direct-nchwc", 1, 1):
            continue
        s = sub_spec(r)
        if s.IC < 64:
            continue
        plane_kb = s.out_h * -(-s.out_w // XT) * XT * 4 / 1024
        fma = s.out_h * s.out_w * s.OC * s.IC
        lo, hi = next(b for b in PLANE_BINS_KB if b[0] < plane_kb <= b[1])
        out[(lo, hi)].append(r["latency_us"] / fma * 1e6)
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _named(items: list[str], ap: argparse.ArgumentParser) -> dict[str, Path]:
    if any("=" not in item for item in items):
        ap.error("test sets are NAME=CSV, e.g. body=benchmarks/results/body-h100/body-samples.csv")
    return {k: Path(v) for k, v in (item.split("=", 1) for item in items)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("predictor", type=Path)
    ap.add_argument("sets", nargs="+", metavar="NAME=CSV")
    ap.add_argument("--planes", action="append", default=[], metavar="NAME=CSV")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    sets, planes = _named(args.sets, ap), _named(args.planes, ap)
    predictor = load(args.predictor)
    doc: dict[str, Any] = {"kernels": {}, "planes": {}}
    print("| set | processor | kernel | window | rows | acc10 | median pred/meas | halves10 |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for name, path in sets.items():
        doc["kernels"][name] = rows = kernel_rows(predictor, test_rows(path))
        for k in rows:
            print(f"| {name} | {k['processor']} | {k['kernel']} | {k['window']} | {k['n']} | "
                  f"{_pct(k['acc10'])} | {k['median_ratio']:.2f} | {_pct(k['halves10'])} |")
    if planes:
        print("\n| set | padded plane | sub-ops | median ns per 1000 FMAs |\n|---|---|---:|---:|")
    for name, path in planes.items():
        bins = direct_1x1_by_plane(test_rows(path))
        doc["planes"][name] = {f"{lo}-{hi}": v for (lo, hi), v in sorted(bins.items())}
        for (lo, hi), v in sorted(bins.items()):
            print(f"| {name} | {lo}-{hi} KB | {len(v)} | {np.median(v):.2f} |")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
