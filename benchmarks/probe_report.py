"""Session 10's device probe (``benchmarks/results/probe-h100``): the numbers PREDICTOR.md quotes.

    python benchmarks/probe_report.py benchmarks/results/probe-h100/probe.csv \
        codl_tvm/data/samples-x86-cuda-h100.csv

Prints the lease's speed against the samples file (sub-ops both measured), the direct 1x1
conv's time per FMA by the bytes of one input-channel plane (IC >= 96), and the 1x1 GEMM's time
for one 13-pixel row per weight float and core.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm.predictor.base import sub_spec  # noqa: E402
from codl_tvm.profiler import read_samples  # noqa: E402
from codl_tvm.profiler.noise import _sub_key  # noqa: E402

PLANE_BINS_KB = ((0, 30), (30, 34), (34, 40), (40, 10**6))


def lease_speed(probe: list[dict], samples: list[dict]) -> dict[str, tuple[int, float]]:
    """Per processor: (sub-ops in both files, median probe / file latency)."""
    file_us: dict[tuple, list[float]] = defaultdict(list)
    for r in samples:
        file_us[_sub_key(r)].append(r["latency_us"])
    out = {}
    for role in ("cpu", "gpu"):
        q = [r["latency_us"] / np.mean(file_us[_sub_key(r)]) for r in probe
             if r["role"] == role and _sub_key(r) in file_us]  # fmt: skip
        out[role] = (len(q), float(np.median(q)) if q else float("nan"))
    return out


def direct_by_plane(probe: list[dict]) -> dict[tuple[int, int], list[float]]:
    """ns per 1000 FMAs of the CPU direct 1x1 sub-ops (IC >= 96), by plane KB bin."""
    out: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in probe:
        if (r["role"], r["algorithm"], r["KH"]) != ("cpu", "direct-nchwc", 1) or r["IC"] < 96:
            continue
        s = sub_spec(r)
        plane_kb = s.H * s.W * 4 / 1024
        fma = s.out_h * s.out_w * s.OC * s.IC
        lo, hi = next(b for b in PLANE_BINS_KB if b[0] < plane_kb <= b[1])
        out[(lo, hi)].append(r["latency_us"] / fma * 1e6)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("probe", type=Path)
    ap.add_argument("samples", type=Path)
    args = ap.parse_args(argv)
    probe, samples = read_samples(args.probe), read_samples(args.samples)
    for role, (n, speed) in lease_speed(probe, samples).items():
        print(f"{role}: {n} sub-ops in both files, probe / file latency median {speed:.3f}")
    print("\n| plane | sub-ops | median ns per 1000 FMAs | range |\n|---|---:|---:|---:|")
    for (lo, hi), v in sorted(direct_by_plane(probe).items()):
        print(f"| {lo}-{hi} KB | {len(v)} | {np.median(v):.2f} | {min(v):.2f}-{max(v):.2f} |")
    print("\n| 1x13 sub-op | us | ns per weight float per core |\n|---|---:|---:|")
    for r in probe:
        if r["role"] == "cpu" and r["model"] == "probe-pack":
            s = sub_spec(r)
            per = r["latency_us"] / (s.IC * s.OC / r["cores"]) * 1e3
            print(f"| IC {s.IC} OC {s.OC} (of {r['OC']}) | {r['latency_us']:.1f} | {per:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
