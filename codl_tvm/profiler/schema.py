"""The profiling sample format: one CSV, one row per measured kernel.

Columns (all present in every row; see :data:`COLUMNS`):

===============  ==========================================================================
pair             device pair name (``cpu-pair``, ``x86-cuda``...); one pair per file
role             ``gpu`` / ``cpu``: the processor that ran the kernel (transfers: destination)
target           the JSON target dict of that processor
op               compute: conv2d, depthwise, dense, pool_max, pool_avg, elementwise;
                 sharing: to_cpu (gpu->cpu to_vdevice), to_gpu (cpu->gpu), slice, concat, sync
H W IC OC        full (unsplit) op shape: input rows/cols, in/out channels (sharing rows: the
                 tensor ``(1, IC, H, W)``)
KH KW SH SW      kernel and stride (1 where they do not apply)
padding          ``top:left:bottom:right`` zero padding of the full op
dilation groups  conv dilation (both axes) and groups
dim              ``H`` or ``OC`` (``-`` for sharing rows)
ratio            GPU share of the split (the plan's ratio; CPU rows ran the other ``1-ratio``)
sub_H sub_W      the sub-op actually run: its input rows/cols, ...
sub_IC sub_OC    ... channels, ...
sub_pad_top      ... and the zero rows it pads itself (true borders only)
sub_pad_bottom
sub_out          output elements of the sub-op
bytes            bytes moved (sharing rows) or the sub-op's output bytes (compute rows)
algorithm        kernel family (e.g. ``llvm-naive``, ``dlight-fallback``, ``dlight-matmul``)
block unit cores blocking of the kernel (outputs per block, 0 = even split over cores;
                 outputs per basic unit; cores/SMs), CoDL Eq. 3
latency_us       the sample's latency in microseconds: median over its rounds of each
                 round's lower-quartile repeat (files before the rounds protocol: the median
                 of one visit's repeats)
spread_us        (max - min) / 2 over all repeats, microseconds
repeat           repeats behind it (all rounds)
model            where the shape came from: a CNN of a workload file, ``random`` or ``sharing``
===============  ==========================================================================

Optional columns (added with the rounds protocol, :mod:`codl_tvm.profiler.rounds`; a file
without them loads with the defaults in brackets):

===============  ==========================================================================
median_us        median of all repeats, microseconds [latency_us]
rounds           interleaved visits the sample got [1]
round_us         each visit's estimate, ``;``-separated microseconds [latency_us]
===============  ==========================================================================
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from codl_tvm.profiler.rounds import EXTRA_COLUMNS

COLUMNS: tuple[str, ...] = (
    "pair", "role", "target", "op",
    "H", "W", "IC", "OC", "KH", "KW", "SH", "SW", "padding", "dilation", "groups",
    "dim", "ratio",
    "sub_H", "sub_W", "sub_IC", "sub_OC", "sub_pad_top", "sub_pad_bottom", "sub_out", "bytes",
    "algorithm", "block", "unit", "cores",
    "latency_us", "spread_us", "repeat", "model",
)  # fmt: skip
INT_COLUMNS = frozenset(
    "H W IC OC KH KW SH SW dilation groups sub_H sub_W sub_IC sub_OC sub_pad_top "
    "sub_pad_bottom sub_out bytes block unit cores repeat rounds".split()
)
FLOAT_COLUMNS = frozenset({"ratio", "latency_us", "spread_us", "median_us"})
KEY_COLUMNS: tuple[str, ...] = (
    "pair", "role", "op", "H", "W", "IC", "OC", "KH", "KW", "SH", "SW",
    "padding", "dilation", "groups", "dim", "ratio", "bytes",
)  # fmt: skip
ROLES = ("gpu", "cpu")
OPTIONAL_COLUMNS: tuple[str, ...] = EXTRA_COLUMNS
ALL_COLUMNS: tuple[str, ...] = COLUMNS + OPTIONAL_COLUMNS


class SampleError(ValueError):
    """A samples file that cannot be used: names the file, the row and the problem."""


def row_key(row: dict[str, Any]) -> tuple[str, ...]:
    """Identity of a measurement, for resuming: same key, same kernel and placement."""
    out = []
    for col in KEY_COLUMNS:
        val = row[col]
        out.append(f"{float(val):.4f}" if col == "ratio" else str(val))
    return tuple(out)


def _parse(path: Path, lineno: int, col: str, text: str) -> Any:
    if col in INT_COLUMNS or col in FLOAT_COLUMNS:
        if text is None or text.strip() == "":
            raise SampleError(f"{path}:{lineno}: column {col!r} is empty")
        try:
            val = float(text)
        except ValueError:
            raise SampleError(
                f"{path}:{lineno}: column {col!r} is not a number: {text!r}"
            ) from None
        if math.isnan(val) or math.isinf(val):
            raise SampleError(f"{path}:{lineno}: column {col!r} is {text}")
        return int(val) if col in INT_COLUMNS else val
    if text is None or text == "":
        raise SampleError(f"{path}:{lineno}: column {col!r} is empty")
    return text


def read_samples(path: str | Path, pair: str | None = None) -> list[dict[str, Any]]:
    """Load and validate a samples CSV.

    Parameters
    ----------
    path : str or Path
        The CSV written by the profiler.
    pair : str, optional
        Expected device pair; rows of any other pair are an error. Without it the file must
        still hold a single pair.

    Raises
    ------
    SampleError
        Missing columns, empty or NaN values, non-positive latencies, unknown roles, or rows
        of more than one device pair.
    """
    path = Path(path)
    if not path.exists():
        raise SampleError(f"{path}: no such samples file")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise SampleError(f"{path}: missing columns {missing}")
        rows = []
        for lineno, raw in enumerate(reader, start=2):
            row = {c: _parse(path, lineno, c, raw[c]) for c in COLUMNS}
            row.update(_optional(path, lineno, raw, row))
            _check_row(path, lineno, row, pair)
            pair = pair or row["pair"]
            rows.append(row)
    if not rows:
        raise SampleError(f"{path}: no samples")
    return rows


def _optional(path: Path, lineno: int, raw: dict[str, Any], row: dict) -> dict[str, Any]:
    """The optional columns of a row, defaulted for files written before them."""
    out: dict[str, Any] = {"median_us": row["latency_us"], "rounds": 1, "round_us": None}
    for col in OPTIONAL_COLUMNS:
        if raw.get(col) not in (None, ""):
            out[col] = _parse(path, lineno, col, raw[col])
    text = out["round_us"]
    try:
        out["round_us"] = [float(x) for x in text.split(";")] if text else [row["latency_us"]]
    except ValueError:
        msg = f"{path}:{lineno}: column 'round_us' is not ;-separated numbers: {text!r}"
        raise SampleError(msg) from None
    if any(math.isnan(x) or x <= 0 for x in out["round_us"]):
        raise SampleError(f"{path}:{lineno}: column 'round_us' has non-positive or NaN values")
    return out


def _check_row(path: Path, lineno: int, row: dict[str, Any], pair: str | None) -> None:
    if pair is not None and row["pair"] != pair:
        raise SampleError(
            f"{path}:{lineno}: sample of device pair {row['pair']!r}, expected {pair!r} "
            "(one file holds one pair's samples)"
        )
    if row["role"] not in ROLES:
        raise SampleError(f"{path}:{lineno}: unknown role {row['role']!r}, expected {ROLES}")
    if row["latency_us"] <= 0:
        raise SampleError(f"{path}:{lineno}: latency_us must be positive, got {row['latency_us']}")


def target_json(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


class SampleWriter:
    """Appends rows to a samples CSV, creating it with a header; knows the rows already there."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.done: set[tuple[str, ...]] = set()
        self.columns: list[str] = list(ALL_COLUMNS)
        if self.path.exists() and self.path.stat().st_size > 0:
            for row in read_samples(self.path):
                self.done.add(row_key(row))
            with self.path.open(newline="") as fh:  # an older file keeps its header
                self.columns = next(csv.reader(fh))
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("w", newline="") as fh:
                csv.DictWriter(fh, self.columns).writeheader()

    def write(self, rows: Iterable[dict[str, Any]]) -> int:
        rows = list(rows)
        with self.path.open("a", newline="") as fh:
            writer = csv.DictWriter(fh, self.columns)
            for row in rows:
                ru = row.get("round_us")
                full = {**row, "round_us": ";".join(map(str, ru)) if isinstance(ru, list) else ru}
                writer.writerow({c: full.get(c, "") for c in self.columns})
                self.done.add(row_key(row))
        return len(rows)

