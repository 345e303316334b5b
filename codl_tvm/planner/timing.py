"""Interleaved timing of several runners in one process (numpy only; runtime-only safe).

Each round times every runner once, in a rotated order, so drift (clocks, temperature, other
load) hits all plans alike; a plan's latency is the median over rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def interleaved(
    runners: Sequence[Any],
    inputs: Sequence[dict[str, np.ndarray]],
    rounds: int = 10,
    number: int = 1,
    deadline_s: float | None = None,
    on_round: Callable[[int], None] | None = None,
) -> list[list[float]]:
    """Seconds per inference of each runner (``runner.time(inputs, repeat=1, number)``), one
    list per runner with one value per round; stops early past ``deadline_s``."""
    start = time.perf_counter()
    for r, x in zip(runners, inputs):  # warm-up: first calls compile/upload
        r.time(x, repeat=1, number=1)
    times: list[list[float]] = [[] for _ in runners]
    for k in range(rounds):
        order = list(range(len(runners)))
        order = order[k % len(order):] + order[:k % len(order)]
        for i in order:
            times[i].append(runners[i].time(inputs[i], repeat=1, number=number))
        if on_round:
            on_round(k)
        if deadline_s is not None and time.perf_counter() - start > deadline_s:
            break
    return times


def representatives(keys: dict[str, str]) -> dict[str, str]:
    """For plans given as ``name -> content key``, the first name with the same content.

    Identical plans compile to identical modules, so a bench times each content once and
    reports that measurement for every name sharing it (two timings of one module differ only
    by noise, which would otherwise read as one plan being slower than the other).
    """
    first: dict[str, str] = {}
    return {name: first.setdefault(key, name) for name, key in keys.items()}


def same_as(reps: dict[str, str]) -> dict[str, dict[str, str]]:
    """``extra`` columns for :func:`summarize`: which plan a row's measurement belongs to."""
    return {n: {"same_as": r} for n, r in reps.items() if r != n}


def summarize(
    names: Sequence[str], times: Sequence[Sequence[float]], predicted_us: dict[str, float],
    ideal_us: float | None = None, extra: dict[str, dict] | None = None,
) -> list[dict[str, Any]]:
    """Bench rows: latency, speedup over the best single processor, share of the ideal gain.

    ``ideal_share = (T_best_single - T_plan) / (T_best_single - T_ideal)``; ``ideal_us`` is
    the bound in measured time (see :func:`calibrated_ideal_us`).
    """
    lat = {n: float(np.median(t)) * 1e3 for n, t in zip(names, times)}
    singles = [lat[n] for n in ("cpu-only", "gpu-only") if n in lat]
    best = min(singles) if singles else float("nan")
    rows = []
    for n in names:
        row = {"plan": n, "latency_ms": lat[n], "spread_ms": _spread(times[names.index(n)]),
               "speedup": best / lat[n] if lat[n] > 0 else float("nan"),
               "predicted_ms": predicted_us.get(n, float("nan")) / 1e3}
        if ideal_us is not None and best - ideal_us / 1e3 > 0:
            row["ideal_share"] = (best - lat[n]) / (best - ideal_us / 1e3)
        else:
            row["ideal_share"] = float("nan")
        row.update((extra or {}).get(n, {}))
        rows.append(row)

    return rows


def _spread(t: Sequence[float]) -> float:
    return float((np.percentile(t, 75) - np.percentile(t, 25)) * 1e3) if len(t) > 1 else 0.0


def calibrated_ideal_us(per_op: Sequence[tuple[float, float]], cpu_only_us: float,
                        gpu_only_us: float) -> float:
    """CoDL's bound in measured time: per-op (T_cpu, T_gpu) estimates scaled so each
    processor's sum equals its measured whole-model latency, then sum 1/(1/T_cpu + 1/T_gpu)."""
    sc, sg = sum(c for c, _ in per_op), sum(g for _, g in per_op)
    if sc <= 0 or sg <= 0:
        return float("nan")
    kc, kg = cpu_only_us / sc, gpu_only_us / sg
    return sum((c * kc) * (g * kg) / (c * kc + g * kg) for c, g in per_op if c > 0 and g > 0)


def format_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    columns = list(columns or ["plan", "latency_ms", "speedup", "ideal_share", "predicted_ms",
                               "cpu_mem_mb", "gpu_mem_mb", "max_rel_err", "same_as"])
    columns = [c for c in columns if any(c in r for r in rows)]
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(columns)]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(x, widths)) for x in cells]
    return "\n".join(out)


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "-" if v != v else f"{v:.3g}" if abs(v) < 100 else f"{v:.1f}"
    return str(v)
