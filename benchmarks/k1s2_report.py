"""1x1 stride-2 convs on the H100 machine's CPU (session 17): the sampled pad pass against the
copy it replaced, and the 1x1 GEMM against the direct conv, each pair timed in one device call.

    python benchmarks/k1s2_report.py benchmarks/results/k1s2-h100 \
        --json benchmarks/results/k1s2-h100/k1s2-report.json                  # 2 s

The folder holds what ``run_remeasure_h100.sh`` brought back from two leases:

- ``k1s2.csv`` (the direct conv with its sampled pad pass, ``cpu_conv.sampled_input``, 12
  visits, 160 control rows) and ``k1s2old.csv`` (the same 521 sub-ops with the whole-input
  copy it had before, 8 visits), one call of the first lease;
- ``lease2/k1s2.csv`` (the direct conv again, 8 visits) and ``lease2/k1s2gemm.csv`` (the 1x1
  GEMM with its strided input pack, built with ``CODL_CPU_GEMM=always``, 8 visits), one call
  of the second.

Ratios are of the two kernels' estimates for the same sub-op in the same call (no lease
scaling). The GEMM table scores dispatch rules for the GEMM at stride 2 by how far the picked
kernel is from the faster of the two (geometric mean) and how many sub-ops it makes more than
10% slower than the direct conv: candidates fitted on these rows, so in-sample.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm.profiler import read_samples  # noqa: E402
from codl_tvm.profiler.schema import row_key  # noqa: E402

# (name, rule on a sub-op row): GEMM where it holds (P = output pixels of the sub-op)
GEMM_RULES: tuple[tuple[str, Callable[[dict], bool]], ...] = (
    ("never (shipped)", lambda r: False),
    ("always", lambda r: True),
    *((f"P >= {p}", lambda r, p=p: r["P"] >= p) for p in (64, 128, 256, 512, 1024)),
    *((f"P >= {p} and OC >= {o}", lambda r, p=p, o=o: r["P"] >= p and r["OC"] >= o)
      for p in (192, 256) for o in (48, 64)),  # fmt: skip
)


def pairs(a: Path, b: Path) -> list[tuple[dict, dict]]:
    """Rows of ``a`` (controls left out) and ``b`` that measured the same sub-op."""
    other = {row_key(r): r for r in read_samples(b)}
    return [(r, other[row_key(r)]) for r in read_samples(a)
            if r["model"] != "control" and row_key(r) in other]  # fmt: skip


def summary(ratios: np.ndarray) -> dict[str, float]:
    q10, med, q90 = np.percentile(ratios, [10, 50, 90])
    return {"n": int(len(ratios)), "median": float(med), "q10": float(q10), "q90": float(q90),
            "geomean": float(np.exp(np.mean(np.log(ratios)))),
            "slower_10pct": int(np.sum(ratios > 1.1)), "faster_10pct": int(np.sum(ratios < 0.9))}


def sampled_vs_copy(folder: Path) -> dict:
    both = pairs(folder / "k1s2.csv", folder / "k1s2old.csv")
    ratio = np.array([new["latency_us"] / old["latency_us"] for new, old in both])
    weight_mb = np.array([new["sub_IC"] * new["sub_OC"] * 4 / 1e6 for new, _ in both])
    bands = {}
    for lo, hi in ((0, 1), (1, 4), (4, 16), (16, np.inf)):
        inside = (weight_mb >= lo) & (weight_mb < hi)
        bands[f"weight {lo}-{hi} MB"] = summary(ratio[inside])
    return {"all": summary(ratio), "by_weight": bands}


def gemm_vs_direct(folder: Path) -> dict:
    both = pairs(folder / "lease2" / "k1s2.csv", folder / "lease2" / "k1s2gemm.csv")
    rows = [{"P": d["sub_out"] // d["sub_OC"], "OC": d["sub_OC"], "direct_us": d["latency_us"],
             "gemm_us": g["latency_us"]} for d, g in both]  # fmt: skip
    direct = np.array([r["direct_us"] for r in rows])
    best = np.array([min(r["direct_us"], r["gemm_us"]) for r in rows])
    rules = {}
    for name, rule in GEMM_RULES:
        picked = np.array([r["gemm_us"] if rule(r) else r["direct_us"] for r in rows])
        rules[name] = {"gemm_rows": int(sum(rule(r) for r in rows)),
                       "over_best_geomean": float(np.exp(np.mean(np.log(picked / best)))),
                       "over_direct_geomean": float(np.exp(np.mean(np.log(picked / direct)))),
                       "slower_than_direct_10pct": int(np.sum(picked / direct > 1.1))}
    return {"all": summary(np.array([r["gemm_us"] / r["direct_us"] for r in rows])),
            "rules": rules}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out = {"sampled_vs_copy": sampled_vs_copy(args.folder),
           "gemm_vs_direct": gemm_vs_direct(args.folder)}
    s = out["sampled_vs_copy"]
    print("| sampled pad pass / whole-input copy | sub-ops | median | q10-q90 | >10% slower |")
    print("|---|---:|---:|---|---:|")
    for name, v in {"all": s["all"], **s["by_weight"]}.items():
        print(f"| {name} | {v['n']} | {v['median']:.3f} | {v['q10']:.2f}-{v['q90']:.2f} "
              f"| {v['slower_10pct']} |")
    g = out["gemm_vs_direct"]
    print(f"\nGEMM / direct on {g['all']['n']} sub-ops: median {g['all']['median']:.3f} "
          f"({g['all']['faster_10pct']} faster, {g['all']['slower_10pct']} slower by >10%)")
    print("\n| GEMM at stride 2 where | sub-ops | picked/best | picked/direct | >10% slower |")
    print("|---|---:|---:|---:|---:|")
    for name, v in g["rules"].items():
        print(f"| {name} | {v['gemm_rows']} | {v['over_best_geomean']:.3f} "
              f"| {v['over_direct_geomean']:.3f} | {v['slower_than_direct_10pct']} |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
