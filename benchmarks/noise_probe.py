"""Where the H100 host's CPU timing noise comes from: one kernel timed several ways, side by side.

Two visits of one CPU sample agree within +-10% only about half the time on the H100 machine's
16-vCPU KVM guest (PREDICTOR.md), and no predictor can beat its data. This probe takes a few
dozen kernels of a profiling bundle and visits each of them ``--visits`` times in every *mode*,
the modes interleaved so that they share the machine's moods:

- ``fresh10``: the profiler's protocol (new input tensors each visit, 5 repeats of >= 10 ms);
- ``reuse10``: the same, the inputs allocated once (does page placement of new buffers matter?);
- ``fresh1`` / ``reuse1``: 40 repeats of >= 1 ms (do short clean windows exist between bursts?).

Every visit records all its repeats and what the system did meanwhile: steal time of the
hypervisor (``/proc/stat``), cgroup CPU throttling (``cpu.stat``), the process's involuntary
context switches and the CPU time other processes used (``noise_probe_device.py``, the
half that runs there with runtime-only TVM). ``summary`` (here, full codl_tvm)
prints the +-10% agreement of pairs of visits per mode and estimator (lower quartile, 10th
percentile, minimum) and how slow visits line up with steal, throttling and preemption.

    python benchmarks/noise_probe.py select .devcarry/recpu-bundle \
        codl_tvm/data/samples-x86-cuda-h100.csv -o .devcarry/recpu-bundle/probe.json
    # H100 (runtime-only TVM): python3 benchmarks/noise_probe.py run .devcarry/recpu-bundle \
    #     --select .devcarry/recpu-bundle/probe.json -o $OUT/probe.jsonl --visits 8
    python benchmarks/noise_probe.py summary probe.jsonl [--json out.json]
    # how many visits, summarised how: disjoint sets of n visits of one kernel, pooled runs
    python benchmarks/noise_probe.py visits benchmarks/results/noise-probe-h100/*.jsonl.gz \
        --exclude t8pin0 [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from noise_probe_device import MODES, run  # noqa: E402  (the device half, runtime-only)


# ---------------------------------------------------------------- select / summary (here)
def select_entries(bundle: Path, samples: Path, out: Path, per_algo: int, seed: int) -> None:
    """Per algorithm: the samples whose visits agreed least, and as many random ones."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from codl_tvm.profiler import read_samples  # noqa: PLC0415

    man = json.loads((bundle / "manifest.json").read_text())
    cols = man["key_columns"]

    def key(row: dict[str, Any]) -> str:
        return "|".join(f"{float(row[c]):.4f}" if c == "ratio" else str(row[c]) for c in cols)

    spread = {}
    for r in read_samples(samples):
        v = np.asarray(r.get("round_us") or [], dtype=float)
        if len(v) >= 2:
            spread[key(r)] = float((v.max() - v.min()) / np.median(v))
    by_algo: dict[str, list[tuple[float, dict[str, str]]]] = {}
    for lib in man["libs"]:
        for e in lib["entries"]:
            k = key(e["row"])
            if k in spread:
                by_algo.setdefault(e["row"]["algorithm"], []).append(
                    (spread[k], {"file": lib["file"], "name": e["name"], "key": k})
                )
    rng = random.Random(seed)
    chosen = []
    for _algo, entries in sorted(by_algo.items()):
        entries.sort(key=lambda x: -x[0])
        worst, rest = entries[:per_algo], entries[per_algo:]
        chosen += [e for _, e in worst] + [e for _, e in rng.sample(rest, min(per_algo, len(rest)))]
    out.write_text(json.dumps(chosen, indent=1))
    print(f"{len(chosen)} kernels from {len(by_algo)} algorithms -> {out}")


def _agree(vals: list[float]) -> tuple[int, int]:
    v = np.asarray(vals)
    rel = np.abs(v[:, None] - v[None, :]) / v[None, :]
    off = ~np.eye(len(v), dtype=bool)
    return int((rel[off] <= 0.1).sum()), int(off.sum())


ESTIMATORS = {"q25": lambda c: np.percentile(c, 25), "p10": lambda c: np.percentile(c, 10),
              "min": np.min, "median": np.median}  # fmt: skip


def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return fh.read().splitlines()


def summary(path: Path, json_out: Path | None) -> None:
    lines = _lines(path)
    head, visits = json.loads(lines[0]), [json.loads(x) for x in lines[1:] if x.strip()]
    print("machine:", json.dumps(head))
    rows = []
    for mode in head.get("modes", MODES):
        for est_name, est in ESTIMATORS.items():
            per: dict[int, list[float]] = {}
            for v in visits:
                if v["mode"] == mode:
                    per.setdefault(v["i"], []).append(float(est(v["costs_us"])))
            ok = n = 0
            for vals in per.values():
                a, b = _agree(vals) if len(vals) >= 2 else (0, 0)
                ok, n = ok + a, n + b
            rows.append(
                {
                    "mode": mode,
                    "estimator": est_name,
                    "kernels": len(per),
                    "agree10": ok / max(n, 1),
                }
            )
    print("\n| mode | estimator | kernels | pairs of visits within +-10% |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['estimator']} | {r['kernels']} | {r['agree10']:.1%} |")
    # slow visits vs what the system did: each visit's q25 over its kernel+mode median
    rel, feats = [], []
    med: dict[tuple, float] = {}
    for key in {(v["i"], v["mode"]) for v in visits}:
        med[key] = float(
            np.median(
                [np.percentile(v["costs_us"], 25) for v in visits if (v["i"], v["mode"]) == key]
            )
        )
    for v in visits:
        dt = max(v["t_s"], 1e-9)
        rel.append(np.percentile(v["costs_us"], 25) / med[(v["i"], v["mode"])])
        feats.append(
            [
                v["steal_j"] / dt,
                (v["busy_j"] - v["own_j"]) / dt,
                v["nivcsw"] / dt,
                v["throttled_us"] / dt / 1e4,
            ]
        )
    rel_a, f = np.asarray(rel), np.asarray(feats)
    slow = rel_a > 1.1
    print(f"\nvisits: {len(rel)}, slower than their kernel's median by >10%: {slow.mean():.1%}")
    names = ["steal jiffies/s", "others' busy jiffies/s", "invol. ctx switches/s",
             "throttled %"]  # fmt: skip
    corr = {}
    for j, nm in enumerate(names):
        c = float(np.corrcoef(f[:, j], rel_a)[0, 1]) if f[:, j].std() > 0 else 0.0
        corr[nm] = c
        print(
            f"  {nm:24} slow {f[slow, j].mean():9.2f}  others {f[~slow, j].mean():9.2f}"
            f"  corr {c:+.2f}"
        )
    by_cpu: dict[int, list[float]] = {}
    for v, x in zip(visits, rel, strict=True):
        if "cpu" in v:
            by_cpu.setdefault(v["cpu"][0], []).append(x)
    if by_cpu:
        print("calling thread's vCPU at the visit's start: visits, share slower by >10%")
        print(
            "  "
            + "  ".join(
                f"{c}: {len(x)}, {np.mean(np.asarray(x) > 1.1):.0%}"
                for c, x in sorted(by_cpu.items())
            )
        )
    if json_out:
        json_out.write_text(
            json.dumps(
                {
                    "machine": head,
                    "agreement": rows,
                    "slow_share": float(slow.mean()),
                    "corr": corr,
                },
                indent=1,
            )
        )


def _sample_estimators() -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from codl_tvm.profiler.rounds import sample_estimate  # noqa: PLC0415  (the profiler's own)

    return {"median": np.median, "min": np.min, "lower-half mean": sample_estimate}


def visits_table(paths: list[Path], json_out: Path | None, draws: int = 40) -> None:
    """+-10% agreement of two disjoint sets of n visits of a kernel, per sample estimator.

    Visits (their lower-quartile estimates, profiler modes ``fresh10``) of every file are
    pooled per kernel; thread settings that change the speed should be left out.
    """
    per: dict[str, list[float]] = {}
    for path in paths:
        for line in _lines(path)[1:]:
            v = json.loads(line)
            if v["mode"] == "fresh10":
                per.setdefault(v["key"], []).append(float(np.percentile(v["costs_us"], 25)))
    rng = random.Random(0)
    rows = []
    estimators = _sample_estimators()
    for n in (1, 2, 3, 5, 8, 12, 16, 20):
        row: dict[str, Any] = {"visits": n}
        for name, est in estimators.items():
            ok = tot = 0
            for vals in per.values():
                if len(vals) < 2 * n:
                    continue
                for _ in range(draws):
                    pick = rng.sample(vals, 2 * n)
                    a, b = est(np.asarray(pick[:n])), est(np.asarray(pick[n:]))
                    ok, tot = ok + (abs(a / b - 1) <= 0.1), tot + 1
            row[name] = ok / tot if tot else None
        rows.append(row)
    print(f"{len(per)} kernels, {min(map(len, per.values()))}+ visits each\n")
    print("| visits per set | " + " | ".join(estimators) + " |")
    print("|---" * (len(estimators) + 1) + "|")
    for r in rows:
        cells = ["-" if r[k] is None else f"{r[k]:.1%}" for k in estimators]
        print(f"| {r['visits']} | " + " | ".join(cells) + " |")
    if json_out:
        json_out.write_text(json.dumps(rows, indent=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("select")
    s.add_argument("bundle", type=Path)
    s.add_argument("samples", type=Path)
    s.add_argument("-o", "--output", type=Path, required=True)
    s.add_argument("--per-algorithm", type=int, default=3)
    r = sub.add_parser("run")
    r.add_argument("bundle", type=Path)
    r.add_argument("--select", type=Path, required=True)
    r.add_argument("-o", "--output", type=Path, required=True)
    r.add_argument("--visits", type=int, default=8)
    r.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    r.add_argument("--pin-master", type=int, help="pin the calling thread to this vCPU")
    m = sub.add_parser("summary")
    m.add_argument("probe", type=Path)
    m.add_argument("--json", type=Path)
    vt = sub.add_parser("visits")
    vt.add_argument("probes", type=Path, nargs="+")
    vt.add_argument("--exclude", default="", help="comma-separated name parts to leave out")
    vt.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "visits":
        drop = [x for x in args.exclude.split(",") if x]
        visits_table([q for q in args.probes if not any(d in q.name for d in drop)], args.json)
    elif args.cmd == "select":
        select_entries(args.bundle, args.samples, args.output, args.per_algorithm, 0)
    elif args.cmd == "run":
        run(
            args.bundle,
            args.select,
            args.output,
            args.visits,
            0,
            args.modes.split(","),
            args.pin_master,
        )
    else:
        summary(args.probe, args.json)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
    sys.exit(main())
