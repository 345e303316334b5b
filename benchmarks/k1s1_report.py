"""The 1x1 GEMM against the direct NCHWc conv on stride-1 1x1 convs (session 20): the same
sub-ops timed with both kernels in one call, on the H100 host's CPU and on the dev CPU.

    python benchmarks/k1s1_report.py benchmarks/results/k1s1-h100 \
        benchmarks/results/k1s1-devcpu --json benchmarks/results/k1s1-h100/k1s1-report.json

Each folder holds ``k1s1direct.csv`` and ``k1s1gemm.csv``: runs of two bundles of the stride-1
1x1 rows the direct conv ran (``remeasure_bundle.py bundle ... --algorithms direct-nchwc``,
the second built with ``CODL_CPU_GEMM=always``), one after the other in one call. Ratios are
GEMM over direct for the same sub-op (no lease scaling); the dispatch takes the GEMM for all
of them since (``cpu_gemm.wins``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from k1s2_report import pairs, summary  # noqa: E402

WORST = 8  # sub-ops listed where the GEMM loses most


def compare(folder: Path) -> dict:
    """GEMM / direct per sub-op of ``folder``'s two runs: all, per source model, the worst."""
    both = pairs(folder / "k1s1gemm.csv", folder / "k1s1direct.csv")
    if not both:
        raise SystemExit(f"{folder}: k1s1gemm.csv and k1s1direct.csv share no sub-op")
    ratio = np.array([g["latency_us"] / d["latency_us"] for g, d in both])
    groups: dict[str, list[float]] = defaultdict(list)
    for (g, _), r in zip(both, ratio, strict=True):
        groups[g["model"]].append(r)
    worst = [{"model": g["model"], "op": f"{g['H']}x{g['W']} {g['IC']}->{g['OC']}",
              "sub": f"{g['sub_H']}x{g['sub_W']} {g['sub_IC']}->{g['sub_OC']}",
              "gemm_us": g["latency_us"], "direct_us": d["latency_us"], "ratio": float(r)}
             for r, (g, d) in sorted(zip(ratio, both, strict=True), key=lambda t: -t[0])]
    return {"all": summary(ratio),
            "by_model": {m: summary(np.array(v)) for m, v in sorted(groups.items())},
            "worst": worst[:WORST]}  # fmt: skip


def _line(name: str, v: dict) -> str:
    return (f"| {name} | {v['n']} | {v['geomean']:.3f} | {v['median']:.3f} "
            f"| {v['q10']:.2f}-{v['q90']:.2f} | {v['faster_10pct']} | {v['slower_10pct']} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", type=Path, nargs="+")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out = {str(f): compare(f) for f in args.folders}
    print("| GEMM / direct | sub-ops | geomean | median | q10-q90 | >10% faster | >10% slower |")
    print("|---|---:|---:|---:|---|---:|---:|")
    for folder, res in out.items():
        print(_line(f"**{Path(folder).name}**", res["all"]))
        for model, v in res["by_model"].items():
            print(_line(f"{Path(folder).name}: {model}", v))
    for folder, res in out.items():
        print(f"\nwhere the GEMM loses most ({Path(folder).name}):")
        for w in res["worst"]:
            print(f"  {w['ratio']:.3f}  {w['model']} {w['op']}, sub-op {w['sub']}: "
                  f"{w['gemm_us']:.1f} vs {w['direct_us']:.1f} us")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
