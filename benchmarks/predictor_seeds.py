"""codl's +-10% accuracy over many seeded 30% splits, and on each held-out CNN.

One seeded split moves by several points when the samples file's row order changes (a merge
reorders rows), so the headline is the mean over ``--seeds`` splits:

    python benchmarks/predictor_seeds.py codl_tvm/data/samples-x86-cuda-h100.csv \
        [--seeds 20] [--json benchmarks/results/predictor-h100-seeds.json] [--by algorithm] \
        [--extra deep=benchmarks/results/deep-h100/deep-samples.csv]

``--extra NAME=CSV`` adds a test set the training file does not hold (the model fits all of
the training file), e.g. the deep-layer stratum, measured and kept out of training.

Each held-out CNN also gets its ceilings, to tell where its misses come from:
- ``in_sample``: acc10 on its rows of the model fitted on the whole file, its rows included.
  Held out well below this, the other rows do not teach its regime (data); this itself well
  below the noise ceilings, the terms cannot fit its kernels (model form).
- ``halves10`` / ``twins10``: the measurement's own reproducibility on its rows
  (:mod:`codl_tvm.profiler.noise`): the odd against the even visits of a row, and rows that
  measured one sub-op against each other.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm.predictor import make  # noqa: E402
from codl_tvm.predictor.accuracy import accuracy_rows, split_models, split_rows  # noqa: E402
from codl_tvm.predictor.opspec import SHARING_KINDS  # noqa: E402
from codl_tvm.profiler import read_samples  # noqa: E402
from codl_tvm.profiler.noise import noise_rows  # noqa: E402

HELD_OUT = ("YOLO-V2", "VGG-16", "POSENET")


Hits = dict[tuple[str, str], list[bool]]


def _acc(train: list[dict], test: list[dict], by: str | None = None,
         hits: Hits | None = None) -> dict[str, float]:
    """Per processor acc10 on ``test``; with ``by``, each compute row's hit is also added to
    ``hits`` under (processor, the row's ``by`` column)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pred = make("codl").fit(train)
        rows = accuracy_rows(pred, test)
        if by is not None and hits is not None:
            comp = [r for r in test if r["op"] not in SHARING_KINDS]
            for r, y in zip(comp, pred.predict(comp), strict=True):
                hits[(r["role"], str(r[by]))].append(abs(y / r["latency_us"] - 1) <= 0.1)
    return _overall(rows)


def _overall(rows: list[dict]) -> dict[str, float]:
    """Per processor acc10 of :func:`accuracy_rows`' ``all`` rows."""
    return {r["processor"]: r["acc10"] for r in rows if r["op"] == "all"}


def _ceilings(rows: list[dict], held_out: dict[str, dict[str, float]]
              ) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per held-out CNN and processor: held-out, in-sample, halves10 and twins10 acc."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = make("codl").fit(rows)
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for model, held in held_out.items():
        mine = [r for r in rows if r["model"] == model]
        inside = _overall(accuracy_rows(whole, mine))
        noise = {n["processor"]: n for n in noise_rows(
            [r for r in mine if r["op"] not in SHARING_KINDS]) if n["op"] == "all"}
        out[model] = {role: {"held_out": held[role], "in_sample": inside[role],
                             "halves10": noise.get(role, {}).get("halves10"),
                             "twins10": noise.get(role, {}).get("twins10")}
                      for role in held}  # fmt: skip
    return out


def _print_ceilings(ceilings: dict[str, dict[str, dict[str, float | None]]]) -> None:
    print("\n| held-out CNN | processor | held out | in-sample | halves10 | twins10 |")
    print("|---|---|---:|---:|---:|---:|")
    for model, by_role in ceilings.items():
        for role, c in by_role.items():
            cells = ["-" if c[k] is None else f"{c[k]:.1%}"
                     for k in ("held_out", "in_sample", "halves10", "twins10")]
            print(f"| {model} | {role} | " + " | ".join(cells) + " |")


def _print_by(by: str, split: Hits, held: dict[str, Hits], seeds: int) -> None:
    models = list(held)
    print(f"\n| processor | {by} | n per split | split acc10 | "
          + " | ".join(f"{m} (n, acc10)" for m in models) + " |")
    print("|---|---|---:|---:|" + "---:|" * len(models))
    for key in sorted(split):
        cells = [f"{len(held[m][key])}, {np.mean(held[m][key]):.1%}" if held[m].get(key)
                 else "-" for m in models]  # fmt: skip
        print(f"| {key[0]} | {key[1]} | {len(split[key]) / seeds:.1f} | "
              f"{np.mean(split[key]):.1%} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("samples", type=Path)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=CSV",
                    help="also test on these samples, not in training")
    ap.add_argument("--by", help="also print acc10 per processor and value of this samples "
                    "column, e.g. algorithm (per kernel) or model")  # fmt: skip
    args = ap.parse_args(argv)
    if any("=" not in item for item in args.extra):
        ap.error("--extra takes NAME=CSV, e.g. deep=benchmarks/results/deep-h100/deep-samples.csv")
    rows = read_samples(args.samples)
    if args.by is not None and args.by not in rows[0]:
        ap.error(f"--by {args.by}: {args.samples} has no such column")
    split_hits: Hits = defaultdict(list)
    held_hits: dict[str, Hits] = {m: defaultdict(list) for m in HELD_OUT}
    splits = [_acc(*split_rows(rows, 0.3, seed), args.by, split_hits)
              for seed in range(args.seeds)]  # fmt: skip
    out = {"seeds": args.seeds, "split": {}, "held_out": {}}
    for role in ("cpu", "gpu"):
        vals = [s[role] for s in splits]
        out["split"][role] = {"mean": float(np.mean(vals)), "min": float(np.min(vals)),
                              "max": float(np.max(vals)), "seed0": vals[0],
                              "seeds_at_target": int(np.sum(np.asarray(vals) >= 0.85))}  # fmt: skip
    for model in HELD_OUT:
        out["held_out"][model] = _acc(*split_models(rows, [model]), args.by, held_hits[model])
    out["ceiling"] = _ceilings(rows, out["held_out"])
    extra = dict(item.split("=", 1) for item in args.extra)
    out["extra"] = {name: _acc(rows, read_samples(path)) for name, path in extra.items()}
    print("| test set | CPU acc10 | GPU acc10 |\n|---|---|---|")
    s = out["split"]
    print(f"| 30% split, mean of {args.seeds} seeds (min-max) | {s['cpu']['mean']:.1%} "
          f"({s['cpu']['min']:.1%}-{s['cpu']['max']:.1%}) | {s['gpu']['mean']:.1%} "
          f"({s['gpu']['min']:.1%}-{s['gpu']['max']:.1%}) |")
    print(f"| 30% split, seed 0 | {s['cpu']['seed0']:.2%} | {s['gpu']['seed0']:.2%} |")
    print(f"| seeds at >= 85% | {s['cpu']['seeds_at_target']} of {args.seeds} "
          f"| {s['gpu']['seeds_at_target']} of {args.seeds} |")
    for model, acc in out["held_out"].items():
        print(f"| held-out {model} | {acc['cpu']:.1%} | {acc['gpu']:.1%} |")
    for name, acc in out["extra"].items():
        cells = [f"{acc[role]:.1%}" if role in acc else "-" for role in ("cpu", "gpu")]
        print(f"| {name} (not in training) | " + " | ".join(cells) + " |")
    _print_ceilings(out["ceiling"])
    if args.by:
        _print_by(args.by, split_hits, held_hits, args.seeds)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
