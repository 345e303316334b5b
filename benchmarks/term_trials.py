"""Candidate terms for the CPU 1x1 stride-2 direct-conv model, each judged four ways.

    python benchmarks/term_trials.py codl_tvm/data/samples-x86-cuda-h100.csv \
        --blind benchmarks/results/deep-h100/deep-samples.csv \
        --blind benchmarks/results/deep2-h100/deep2-samples.csv \
        --blind benchmarks/results/body-h100/body-samples.csv \
        --json benchmarks/results/term-trials.json                               # ~1 min

Every candidate of :data:`TRIALS` changes the terms of ``cpu_terms.cpu_conv`` for 1x1
stride-2 sub-ops only. It either appends one term or zeroes one slot. The predictor is then
fitted and scored as follows:

- ``split``: CPU acc10, mean of ``--seeds`` 30% splits; ``split_k1s2``: that split's 1x1
  stride-2 rows only.
- ``loso``: acc10 of each 1x1 stride-2 shape's rows, from a fit without that shape's rows
  (leave one shape out). A term that only fits the shapes it was chosen on falls here.
- ``blind``: acc10 of the ``--blind`` files' 1x1 stride-2 CPU rows, from a fit on the whole
  file. Those rows are strata the model never trained on.
- ``yolo``: YOLO-V2's CPU rows held out (the other CNN target).

The JSON also keeps, per trial, the 1x1 stride-2 model's fitted units on the whole file
(``units``: t0, then one per term) and the blind rows' median predicted / measured latency per
register-tile width (``blind_by_x_tile``).

``both up`` marks a candidate that raises ``loso`` and ``blind`` by at least one point each:
the least a term must do before it is worth a closer look (a threshold that does it alone,
its neighbours not, was picked by chance). No term is installed in the library here; the
table reproduces the trials that ``PREDICTOR.md`` reports.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm import tiling  # noqa: E402
from codl_tvm.predictor import blocking, make  # noqa: E402
from codl_tvm.predictor.accuracy import split_models, split_rows  # noqa: E402
from codl_tvm.predictor.base import sub_spec  # noqa: E402
from codl_tvm.predictor.blocking import variant  # noqa: E402
from codl_tvm.predictor.cpu_chunks import conv_core_panels  # noqa: E402
from codl_tvm.predictor.cpu_terms import direct_padded_in  # noqa: E402
from codl_tvm.predictor.mirror import Machine, conv_shape, sampled  # noqa: E402
from codl_tvm.predictor.opspec import OpSpec  # noqa: E402
from codl_tvm.profiler import read_samples  # noqa: E402

KEY = ("cpu", "direct-nchwc")
MODEL = "cpu/conv2d/direct-nchwc/k1s2"
LINE_BYTES = 64
L1_SPILL_SLOT = 5  # cpu_conv's weight loads once a task's panel spills L1
PANEL_SLOT = 8  # the busiest worker's weight panels, a 1x1 one up to an L1 (session 18)
WRITTEN_SLOT = 12  # the bytes the call writes beyond the L2s (session 18, a tied unit)


@dataclass(frozen=True)
class Tiles:
    """The direct conv's blocking of one sub-op (``schedules/cpu_conv.py``)."""

    s: OpSpec
    vecs: int
    x_tile: int
    tasks: int
    waves: int
    cores: int
    plane_bytes: int  # one channel of the padded (sampled) input: the hot loop's rc step
    ocb: int  # output channels of a task (its weight panel's rows)

    @classmethod
    def of(cls, s: OpSpec, m: Machine) -> Tiles:
        ocb, xt = tiling.direct_tiles(conv_shape(s), m)
        tasks = tiling.direct_tasks(conv_shape(s), m)
        hp, wp = direct_padded_in(s, m)
        waves = math.ceil(tasks / m.cores)
        return cls(s, ocb // m.lanes, xt, tasks, waves, m.cores, hp * wp * 4, ocb)

    @property
    def panel_floats_uncapped(self) -> float:
        """The busiest worker's weight panels, each counted whole (the KxK models' term)."""
        ocp = math.ceil(self.s.OC / self.ocb)
        most, _ = conv_core_panels(ocp, self.tasks // ocp, self.cores)
        return most * self.ocb * self.s.reduction

    @property
    def step_lines(self) -> int:
        """Cache lines one rc step of a task reads: its x_tile inputs, adjacent in the sampled
        copy of a 1x1 window at stride > 1, SW apart in the padded copy of any other."""
        step = 1 if sampled(self.s) else self.s.SW
        return math.ceil(((self.x_tile - 1) * step + 1) * 4 / LINE_BYTES)


@dataclass(frozen=True)
class Trial:
    why: str
    term: Callable[[Tiles], float] | None = None  # appended for 1x1 stride-2 sub-ops
    drop: int | None = None  # slot of cpu_conv's terms zeroed for them


TRIALS: dict[str, Trial] = {
    "step lines": Trial(
        "lines of the critical core's rc steps (a new input plane each step)",
        lambda g: g.waves * g.s.IC * g.step_lines),
    **{f"step lines, planes > {b} B": Trial(
        f"the same where a plane spans more than {b} B (smaller ones share lines or pages)",
        lambda g, b=b: g.waves * g.s.IC * g.step_lines * (g.plane_bytes > b))
       for b in (256, 512, 1024, 4096)},
    "rc steps": Trial("rc steps of the critical core (loop overhead per step)",
                      lambda g: g.waves * g.s.IC),
    "FMA latency": Trial(
        "idle FMA slots of a step with fewer than 8 accumulators (4-cycle latency, 2 ports)",
        lambda g: g.waves * g.s.IC * max(0, 8 - g.x_tile * g.vecs)),
    "waves": Trial("task waves (one dispatch each)", lambda g: g.waves),
    "tasks per core": Trial("tasks per core", lambda g: g.tasks / g.cores),
    "pad pass reads": Trial(
        "input rows the pad pass reads, stride-2 rows it skips included",
        lambda g: g.s.IC * g.s.H * g.s.W / g.cores),
    "pad pass rows": Trial(
        "rows of the sampled pad pass per core (a cost per row beside the one per element)",
        lambda g: g.s.IC * g.s.out_h / g.cores),
    "no L1 spill term": Trial("session 15's closest trial: the weight-panel L1 term dropped",
                              drop=L1_SPILL_SLOT),
    "no panel term": Trial("session 18's panel term dropped", drop=PANEL_SLOT),
    "panels uncapped": Trial("the panel term counting each panel whole, as the KxK model's",
                             lambda g: g.panel_floats_uncapped, drop=PANEL_SLOT),
    "no written-bytes term": Trial("session 18's bytes written beyond the L2s dropped",
                                   drop=WRITTEN_SLOT),
}


@contextmanager
def installed(trial: Trial | None) -> Iterator[None]:
    """``blocking.TERMS`` with ``trial`` applied to the direct conv, restored on exit."""
    base = blocking.TERMS[KEY]

    def terms(s: OpSpec, m: Machine) -> list[float]:
        t = base(s, m)
        if trial is None or variant(s) != "k1s2":
            return t + [0.0]
        if trial.drop is not None:
            t[trial.drop] = 0.0
        return t + [trial.term(Tiles.of(s, m)) if trial.term else 0.0]

    blocking.TERMS[KEY] = terms
    try:
        yield
    finally:
        blocking.TERMS[KEY] = base


def _fit(rows: list[dict[str, Any]]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make("codl").fit(rows)


def _hits(pred: Any, rows: list[dict[str, Any]]) -> np.ndarray:
    y = pred.predict(rows) if rows else np.zeros(0)
    return np.abs(y / np.array([r["latency_us"] for r in rows]) - 1) <= 0.1


def _cpu(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["role"] == "cpu" and r["algorithm"] != "copy"]


def _k1s2_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in _cpu(rows)
            if r["algorithm"] == "direct-nchwc" and variant(sub_spec(r)) == "k1s2"]


def _shape(r: dict[str, Any]) -> tuple[int, ...]:
    return (r["H"], r["W"], r["IC"], r["OC"])


def _by_x_tile(pred: Any, rows: list[dict[str, Any]]) -> dict[int, float]:
    ratio = pred.predict(rows) / np.array([r["latency_us"] for r in rows]) if rows else []
    by: dict[int, list[float]] = {}
    for r, q in zip(rows, ratio, strict=True):
        by.setdefault(Tiles.of(sub_spec(r), pred.machine_).x_tile, []).append(float(q))
    return {x: float(np.median(v)) for x, v in sorted(by.items())}


def score(rows: list[dict[str, Any]], blind: list[dict[str, Any]], seeds: int
          ) -> dict[str, Any]:
    """The figures of the module docstring, for the terms installed now."""
    split, split_k1s2 = [], []
    for seed in range(seeds):
        train, test = split_rows(rows, 0.3, seed)
        p = _fit(train)
        split.append(_hits(p, _cpu(test)).mean())
        split_k1s2.extend(_hits(p, _k1s2_rows(test)))
    mine = _k1s2_rows(rows)
    loso = []
    for shape in sorted({_shape(r) for r in mine}):
        out = [r for r in mine if _shape(r) == shape]
        left = {id(r) for r in out}
        loso.extend(_hits(_fit([r for r in rows if id(r) not in left]), out))
    train, test = split_models(rows, ["YOLO-V2"])
    whole, blind = _fit(rows), _k1s2_rows(blind)
    return {"split": float(np.mean(split)), "split_k1s2": float(np.mean(split_k1s2)),
            "loso": float(np.mean(loso)), "blind": float(_hits(whole, blind).mean()),
            "yolo": float(_hits(_fit(train), _cpu(test)).mean()),
            "units": [float(f"{u:.3g}") for u in whole.t_[MODEL]],
            "blind_by_x_tile": _by_x_tile(whole, blind)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("samples", type=Path)
    ap.add_argument("--blind", type=Path, action="append", default=[])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--only", action="append", help="run only these TRIALS names")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = read_samples(args.samples)
    blind = [r for p in args.blind for r in read_samples(p)]
    unknown = set(args.only or ()) - set(TRIALS)
    if unknown:
        ap.error(f"--only: no trials named {sorted(unknown)}; known: {sorted(TRIALS)}")
    with installed(None):
        base = score(rows, blind, args.seeds)
    out = {"baseline": base, "trials": {}}
    cols = ("split", "split_k1s2", "loso", "blind", "yolo")
    print("| trial | " + " | ".join(cols) + " | both up |\n|---|" + "---:|" * len(cols) + "---|")
    print("| (none) | " + " | ".join(f"{100 * base[c]:.1f}" for c in cols) + " | |", flush=True)
    for name in args.only or TRIALS:
        with installed(TRIALS[name]):
            s = score(rows, blind, args.seeds)
        s["both_up"] = s["loso"] >= base["loso"] + 0.01 and s["blind"] >= base["blind"] + 0.01
        s["why"] = TRIALS[name].why
        out["trials"][name] = s
        print(f"| {name} | " + " | ".join(f"{100 * s[c]:.1f}" for c in cols)
              + f" | {'yes' if s['both_up'] else 'no'} |", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
