"""CPU Winograd before / after the V-plane skew, and the GPU output-plane and pool shapes, from
one H100 device call (``run_winograd_planes_h100.sh``): a table and JSON.

    python benchmarks/winograd_planes.py benchmarks/results/winograd-planes-h100 \
        [--json benchmarks/results/winograd-planes-h100.json]

Old and new kernels ran one after another in the same call (old, new, old again), so
``old / new`` compares them on one lease; the direct convs, whose kernel did not change, show
the drift (their old / new should be ~1).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

KEY = ("algorithm", "H", "W", "IC", "OC", "KH", "SH", "dim", "sub_H", "sub_OC", "sub_pad_top")


def _load(path: Path) -> dict[tuple, float]:
    with open(path, newline="") as f:
        return {tuple(r[k] for k in KEY): float(r["latency_us"]) for r in csv.DictReader(f)}


def _out_plane(r: dict) -> int:
    pads = [int(p) for p in r["padding"].split(":")]
    k, s = int(r["KH"]), int(r["SH"])
    oh = (int(r["H"]) + pads[0] + pads[2] - k) // s + 1
    ow = (int(r["W"]) + pads[1] + pads[3] - k) // s + 1
    return oh * ow


def cpu_rows(folder: Path) -> list[dict]:
    old1, new, old2 = (_load(folder / f"{n}.csv") for n in ("old1", "new", "old2"))
    out = []
    for key in sorted(new, key=lambda k: (k[0], int(k[8]), int(k[9]))):
        old = (old1[key] + old2[key]) / 2
        out.append({"algorithm": key[0], "op": f"{key[1]}x{key[2]} {key[3]}->{key[4]}",
                    "dim": key[7], "sub_H": int(key[8]), "sub_OC": int(key[9]),
                    "old_us": round(old, 1), "new_us": round(new[key], 1),
                    "old_drift": round(old1[key] / old2[key], 3),
                    "speedup": round(old / new[key], 3)})  # fmt: skip
    return out


def gpu_rows(folder: Path) -> list[dict]:
    with open(folder / "gpuexp.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        p = _out_plane(r)
        moved_mb = (int(r["H"]) * int(r["W"]) + p) * int(r["IC"]) * 4 / 1e6
        out.append({"op": r["op"], "shape": f"{r['H']}x{r['W']} {r['IC']}->{r['OC']} "
                    f"k{r['KH']}s{r['SH']}", "plane": p, "plane_align_bytes": min(32, 4 * (p & -p)),
                    "moved_mb": round(moved_mb, 1), "us": float(r["latency_us"])})  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cpu, gpu = cpu_rows(args.folder), gpu_rows(args.folder)
    print("| CPU kernel | op | part rows | old us | new us | old / new | old1 / old2 |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in cpu:
        if r["algorithm"].startswith("winograd"):
            print(f"| {r['algorithm']} | {r['op']} | {r['sub_H']} | {r['old_us']} | "
                  f"{r['new_us']} | {r['speedup']:.2f} | {r['old_drift']:.2f} |")
    for algo in sorted({r["algorithm"] for r in cpu}):
        s = np.array([r["speedup"] for r in cpu if r["algorithm"] == algo])
        print(f"{algo}: old / new median {np.median(s):.2f}, range {s.min():.2f}-{s.max():.2f}")
    print("\n| GPU op | shape | output plane | plane start aligned to (B) | moved MB | us |")
    print("|---|---|---:|---:|---:|---:|")
    for r in gpu:
        print(f"| {r['op']} | {r['shape']} | {r['plane']} | {r['plane_align_bytes']} | "
              f"{r['moved_mb']} | {r['us']:.1f} |")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu, "gpu": gpu}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
