"""The text of a predictor file: compact JSON with short floats, trained ranges by role.

A predictor is a few KB of JSON (``BasePredictor.save``); these helpers keep it small and
exact: floats in the shortest text that reads back as the same number, roles of equal ranges
under one key.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any


def round_floats(v: Any, digits: int = 5) -> Any:
    if isinstance(v, dict):
        return {k: round_floats(x, digits) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [round_floats(x, digits) for x in v]
    if isinstance(v, float):
        r = float(f"{v:.{digits}g}")
        return int(r) if r.is_integer() and abs(r) < 1e15 else r  # "0", not "0.0": 2 KB files
    return v


_EXPONENT_ZEROS = re.compile(r"e([+-])0+(\d)")


def compact_json(v: Any) -> str:
    """JSON without spaces and with short exponents (``8.5e-5``, not ``8.5e-05``): what a
    predictor file is, and what its ``size_bytes`` counts."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{compact_json(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(compact_json(x) for x in v) + "]"
    if isinstance(v, float):
        return shortest_float(v)
    return json.dumps(v)


def shortest_float(v: float) -> str:
    """The shortest text that reads back as exactly ``v`` (``6.27e-4``, not ``0.000627``)."""
    text = _EXPONENT_ZEROS.sub(r"e\1\2", json.dumps(v))
    if not math.isfinite(v):
        return text
    for digits in range(17):
        sci = _EXPONENT_ZEROS.sub(r"e\1\2", f"{v:.{digits}e}").replace("e+", "e")
        if float(sci) == v:
            return sci if len(sci) < len(text) else text
    return text


def compact_ranges(ranges: dict[str, Any]) -> dict[str, Any]:
    """Roles of equal trained ranges under one key, joined by commas (the profiler measures
    every shape on both processors, so a pair's two ranges are one)."""
    out: dict[str, Any] = {}
    for role, r in ranges.items():
        same = next((k for k, v in out.items() if v == r), None)
        if same is None:
            out[role] = r
        else:
            out[f"{same},{role}"] = out.pop(same)
    return out


def expand_ranges(ranges: dict[str, Any]) -> dict[str, Any]:
    return {role: r for key, r in ranges.items() for role in key.split(",")}
