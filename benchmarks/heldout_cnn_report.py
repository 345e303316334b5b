"""CNNs the predictor never saw, measured on another instance beside control rows of its samples.

    python benchmarks/heldout_cnn_report.py codl_tvm/data/predictor-x86-cuda.json \
        benchmarks/results/resnet-h100/joined/rnjoin.csv \
        codl_tvm/data/samples-x86-cuda-h100.csv \
        --json benchmarks/results/resnet-h100/resnet-report.json                 # 5 s

The measured file is one run of a joined bundle (``python -m codl_tvm.profiler join``): the
CNNs' sub-ops (a ``--workload`` bundle) interleaved with control rows of the samples file
(``codl-tvm profile-join``). The controls' median ratio to the samples
file is the instance's speed per processor while the CNNs ran. Each CNN row is scored against
the shipped predictor:

- ``raw``: its latency as measured;
- ``calibrated``: its latency divided by the instance factor, as ``codl-tvm calibrate`` would do
  from those controls (the figures comparable with the held-out CNNs of the samples file).

The ``flops`` and ``eop`` baselines, trained on the samples file, are scored the same way
(calibrated). The measurement's own reproducibility is printed beside: ``halves10`` (odd
against even visits of a row) and ``twins10`` (rows that measured one sub-op).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm.predictor import load, make  # noqa: E402
from codl_tvm.predictor.opspec import SHARING_KINDS  # noqa: E402
from codl_tvm.profiler import read_samples  # noqa: E402
from codl_tvm.profiler.noise import noise_rows, same_kernel  # noqa: E402
from codl_tvm.profiler.schema import row_key  # noqa: E402

BASELINES = ("flops", "eop")
MIN_CONTROLS = 20  # per processor: a median over fewer rows moves by several percent


def instance_speed_rows(old_rows: list[dict], new_rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per processor: median, quartiles and count of new / file latency over the control rows
    of ``new_rows`` (rows of the samples file measured again, ``model = control``)."""
    old = {row_key(r): r for r in old_rows}
    ratios: dict[str, list[float]] = {}
    for r in new_rows:
        o = old.get(row_key(r))
        if r["model"] == "control" and o is not None and same_kernel(r, o):
            ratios.setdefault(r["role"], []).append(r["latency_us"] / o["latency_us"])
    out = {}
    for role, v in ratios.items():
        q25, med, q75 = np.percentile(v, [25, 50, 75])
        out[role] = {"median": float(med), "q25": float(q25), "q75": float(q75), "n": len(v)}
    return out


def check_controls(speed: dict[str, dict[str, float]], roles: set[str], new: object) -> None:
    """Stop unless every processor of ``roles`` has :data:`MIN_CONTROLS` control rows."""
    short = sorted(r for r in roles if speed.get(r, {}).get("n", 0) < MIN_CONTROLS)
    if short:
        raise SystemExit(f"{new}: fewer than {MIN_CONTROLS} control rows on {short}; "
                         "measure rows of the samples file with model=control in the same call")


def cnn_rows(rows: list[dict], known: set[str]) -> dict[str, list[dict]]:
    """Compute rows per CNN, leaving out the controls and models the samples file holds."""
    out: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r["op"] not in SHARING_KINDS and r["model"] != "control" and r["model"] not in known:
            out[r["model"]].append(r)
    return dict(sorted(out.items()))


def _ratios(pred: Any, rows: list[dict], factor: float) -> np.ndarray:
    """Predicted over measured latency, the measurement divided by ``factor``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # out-of-range notes: the table says how it went
        p = np.asarray(pred.predict(rows), dtype=float)
    return p / (np.array([r["latency_us"] for r in rows]) / factor)


def _stats(q: np.ndarray) -> dict[str, float]:
    return {"n": int(len(q)), "acc10": float(np.mean(np.abs(q - 1) <= 0.1)),
            "mape": float(np.mean(np.abs(1 / q - 1))), "median_ratio": float(np.median(q))}


def score(predictor: Any, baselines: dict[str, Any], rows: list[dict], samples: list[dict]
          ) -> dict[str, Any]:
    """Instance factors, and per CNN and processor the predictors' scores (see the docstring)."""
    speed = instance_speed_rows(samples, rows)
    cnns = cnn_rows(rows, {r["model"] for r in samples})
    roles = {r["role"] for rs in cnns.values() for r in rs}
    check_controls(speed, roles, "the measured file")
    out: dict[str, Any] = {"instance": speed, "cnns": {}}
    for cnn, rs in cnns.items():
        noise = {n["processor"]: n for n in noise_rows(rs) if n["op"] == "all"}
        per_role = {}
        for role in sorted(roles):
            mine = [r for r in rs if r["role"] == role]
            if not mine:
                continue
            f = speed[role]["median"]
            q = _ratios(predictor, mine, f)
            by_algo = {a: _stats(q[[r["algorithm"] == a for r in mine]])
                       for a in sorted({r["algorithm"] for r in mine})}  # fmt: skip
            per_role[role] = {
                "raw": _stats(_ratios(predictor, mine, 1.0)), "calibrated": _stats(q),
                "by_algorithm": by_algo,
                **{k: _stats(_ratios(b, mine, f))["acc10"] for k, b in baselines.items()},
                "halves10": noise.get(role, {}).get("halves10"),
                "twins10": noise.get(role, {}).get("twins10"),
            }  # fmt: skip
        out["cnns"][cnn] = per_role
    return out


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def print_tables(rep: dict[str, Any]) -> None:
    print("instance factor (controls / samples file, median): " + ", ".join(
        f"{role} {s['median']:.3f} (n {s['n']}, q25-q75 {s['q25']:.3f}-{s['q75']:.3f})"
        for role, s in sorted(rep["instance"].items())))  # fmt: skip
    print("\n| CNN | processor | rows | codl raw | codl calibrated | median pred/meas | "
          + " | ".join(BASELINES) + " | halves10 | twins10 |")
    print("|---|---|---:|---:|---:|---:|" + "---:|" * len(BASELINES) + "---:|---:|")
    for cnn, per_role in rep["cnns"].items():
        for role, s in per_role.items():
            print(f"| {cnn} | {role} | {s['calibrated']['n']} | {_pct(s['raw']['acc10'])} | "
                  f"**{_pct(s['calibrated']['acc10'])}** | {s['calibrated']['median_ratio']:.3f}"
                  " | " + " | ".join(_pct(s[b]) for b in BASELINES)
                  + f" | {_pct(s['halves10'])} | {_pct(s['twins10'])} |")  # fmt: skip
    print("\n| CNN | processor | kernel | rows | acc10 (calibrated) | median pred/meas |")
    print("|---|---|---|---:|---:|---:|")
    for cnn, per_role in rep["cnns"].items():
        for role, s in per_role.items():
            for algo, a in s["by_algorithm"].items():
                print(f"| {cnn} | {role} | {algo} | {a['n']} | {_pct(a['acc10'])} | "
                      f"{a['median_ratio']:.3f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("predictor", type=Path)
    ap.add_argument("measured", type=Path, help="one run of a joined bundle: CNNs + controls")
    ap.add_argument("samples", type=Path, help="the samples file the predictor was trained on")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    samples = read_samples(args.samples)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        baselines = {k: make(k).fit(samples) for k in BASELINES}
    rep = score(load(args.predictor), baselines, read_samples(args.measured), samples)
    print_tables(rep)
    if args.json:
        args.json.write_text(json.dumps(rep, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
