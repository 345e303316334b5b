"""How reproducible samples are: the +-10% ceiling no latency predictor can pass.

For every row measured in >= 2 rounds (``rounds`` / ``round_us`` columns), each ordered pair of
its rounds counts as "a perfect predictor's answer (one round) against a measurement (another
round)"; ``agree10`` is the fraction of those pairs within +-10%. Files written before the
rounds protocol have one visit per row: there the same sub-op measured in several rows (the same
kernel reached from different full ops or splits) stands in for rounds (``source`` says which).

``twins10`` looks across rows in either kind of file: where one sub-op was measured as two rows
(a full op reached as both the H and the OC split at ratio 0, or two full ops with one sub-op),
the fraction of those rows' pairs of ``latency_us`` within +-10%. Visits of one row share its
buffers and its place in the bundle; two rows do not, so ``twins10`` below ``halves10`` says
that part of a row's error stays with the row however many visits it gets.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from codl_tvm.profiler.rounds import sample_estimate

SUB_OP = ("role", "op", "algorithm", "sub_H", "sub_W", "sub_IC", "sub_OC", "KH", "KW", "SH",
          "SW", "sub_pad_top", "sub_pad_bottom", "dilation", "groups")  # fmt: skip


def _sub_key(row: dict[str, Any]) -> tuple:
    _, left, _, right = str(row["padding"]).split(":")
    return (*(row[c] for c in SUB_OP), left, right)


def repeated_measurements(rows: Sequence[dict[str, Any]]) -> tuple[str, list[tuple]]:
    """(source, [(role, op, [latencies of one sample])]) for samples measured >= 2 times."""
    rounds = [r for r in rows if len(r.get("round_us") or []) >= 2]
    if rounds:
        return "rounds", [(r["role"], r["op"], list(r["round_us"])) for r in rounds]
    return "duplicates", twin_groups(rows)


def twin_groups(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str, list[float]]]:
    """(role, op, [latency_us of each row]) for every sub-op measured as two or more rows."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        groups[_sub_key(r)].append(r["latency_us"])
    return [(k[0], k[1], v) for k, v in groups.items() if len(v) >= 2]


def _pairs10(vals: Sequence[float], tol: float) -> tuple[int, int]:
    v = np.asarray(vals, dtype=float)
    rel = np.abs(v[:, None] - v[None, :]) / v[None, :]
    off = ~np.eye(len(v), dtype=bool)
    return int(np.sum(rel[off] <= tol)), int(off.sum())


def _halves_agree(vals: Sequence[float], tol: float) -> bool | None:
    if len(vals) < 4:
        return None
    odd, even = sample_estimate(vals[0::2]), sample_estimate(vals[1::2])
    return abs(odd - even) <= tol * min(odd, even)


def noise_rows(rows: Sequence[dict[str, Any]], tol: float = 0.1) -> list[dict[str, Any]]:
    """Per (processor, op) and per processor (``all``): samples, pairs, agree10, halves10."""
    source, reps = repeated_measurements(rows)
    acc: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    spread: dict[tuple[str, str], list[float]] = defaultdict(list)
    halves: dict[tuple[str, str], list[bool]] = defaultdict(list)
    twins: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for role, op, vals in twin_groups(rows):
        ok, n = _pairs10(vals, tol)
        for key in ((role, op), (role, "all")):
            twins[key][0] += ok
            twins[key][1] += n
    for role, op, vals in reps:
        ok, n = _pairs10(vals, tol)
        rel = (max(vals) - min(vals)) / float(np.median(vals))
        half = _halves_agree(vals, tol) if source == "rounds" else None
        for key in ((role, op), (role, "all")):
            acc[key][0] += 1
            acc[key][1] += ok
            acc[key][2] += n
            spread[key].append(rel)
            if half is not None:
                halves[key].append(half)
    return [
        {"processor": role, "op": op, "source": source, "samples": s, "pairs": n,
         "agree10": ok / n, "median_range": float(np.median(spread[(role, op)])),
         "halves10": float(np.mean(halves[(role, op)])) if halves[(role, op)] else None,
         "twins10": _ratio(twins.get((role, op)))}
        for (role, op), (s, ok, n) in sorted(acc.items())
    ]  # fmt: skip


def _ratio(counts: list[int] | None) -> float | None:
    return counts[0] / counts[1] if counts and counts[1] else None


def format_noise(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown table of :func:`noise_rows`."""
    if not rows:
        return "noise: no sample was measured twice (profile with --rounds 2 or more)"
    lines = [
        f"noise ceiling (source: {rows[0]['source']}): pairs of repeated measurements of one "
        "sample within +-10% (agree10: single visits; halves10: the estimates of the odd and "
        "the even visits; twins10: rows that measured one sub-op)",
        "",
        "| processor | op | samples | pairs | agree10 | halves10 | twins10 "
        "| median (max-min)/median |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        half, twin = (_pct(r.get(c)) for c in ("halves10", "twins10"))
        lines.append(
            f"| {r['processor']} | {r['op']} | {r['samples']} | {r['pairs']} | "
            f"{r['agree10']:.1%} | {half} | {twin} | {r['median_range']:.1%} |"
        )
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def same_kernel(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two rows of one sample key measured the same kernel (a file without the
    ``algorithm`` column: assumed so). The key leaves the kernel out, and a dispatch change
    (as when every stride-1 1x1 conv went to the 1x1 GEMM) gives a key another kernel."""
    return "algorithm" not in a or "algorithm" not in b or a["algorithm"] == b["algorithm"]


def instance_ratios(rows: Sequence[dict[str, Any]], other: dict[tuple, dict[str, Any]],
                 group: str | None = None) -> dict[str, list[float]]:
    """Per value of the column ``group`` (key ``"*"``: every row), the ratios of ``other``'s
    latency over ``rows``' for the rows both measured with the same kernel (``other`` keyed by
    ``row_key``): how much slower another machine ran the same samples. A row whose kernel
    changed between the two (its ``algorithm``) is another measurement, no speed ratio.
    Latencies may be CSV strings."""
    from codl_tvm.profiler.schema import row_key

    ratios: dict[str, list[float]] = {"*": []}
    for r in rows:
        o = other.get(row_key(r))
        if o is None or not same_kernel(r, o):
            continue
        ratio = float(o["latency_us"]) / float(r["latency_us"])
        ratios["*"].append(ratio)
        if group:
            ratios.setdefault(str(r[group]), []).append(ratio)
    if not ratios["*"]:
        raise SystemExit("the two measurements share no rows (another pair or bundle?)")
    return ratios
