"""How a codl predictor file stores its models: keys of older formats, models grouped by
role, trailing zero units left out (split off ``codl.py``)."""

from __future__ import annotations

from typing import Any

from codl_tvm.predictor.blocking import BY_FILTER

# the kernel each (family, kind) ran before algorithms were part of the model keys
_OLD_ALGORITHM = {
    ("cpu", "conv2d"): "direct-nchwc", ("cpu", "depthwise"): "depthwise-direct",
    ("cpu", "pool_max"): "pool", ("cpu", "pool_avg"): "pool", ("cpu", "dense"): "gemv",
    ("cpu", "elementwise"): "parallel-loops", ("gpu", "conv2d"): "implicit-gemm",
    ("gpu", "depthwise"): "depthwise-direct", ("gpu", "pool_max"): "pool",
    ("gpu", "pool_avg"): "pool", ("gpu", "dense"): "dlight-fallback",
    ("gpu", "elementwise"): "elementwise",
}  # fmt: skip


def current_key(key: str, value: Any, family: dict[str, str]) -> str:
    """Keys of files written before algorithm keys (``role/kind/variant[/algorithm]``)."""
    parts = key.split("/")
    if len(parts) < 3 or parts[2] not in ("", "k1", "kn"):
        return key
    role, kind, var = parts[:3]
    if isinstance(value, dict):  # recorded: role/kind/variant/algorithm
        return f"{role}/{kind}/{'/'.join(parts[3:])}"
    algo = _OLD_ALGORITHM.get((family.get(role, role), kind), "")
    return f"{role}/{kind}/{algo}" + (f"/{var}" if algo in BY_FILTER else "")


def flat_models(t: dict[str, Any]) -> dict[str, Any]:
    """``role/kind/...`` -> units, from a file's models grouped by role (format 2) or keyed
    flat (format 1: every key holds a ``/``)."""
    if all("/" in k for k in t):
        return t
    return {f"{role}/{rest}": units for role, models in t.items() for rest, units in models.items()}


def trim_zeros(units: Any) -> Any:
    """A model's unit list without its trailing zeros (a recorded model's dict as it is)."""
    if not isinstance(units, list):
        return units
    n = len(units)
    while n > 1 and units[n - 1] == 0:
        n -= 1
    return units[:n]
