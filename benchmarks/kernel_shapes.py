"""Benchmark kernels from ../shared/workloads/*.csv as one-op legalized PrimFuncs."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parents[2] / "shared" / "workloads"


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """One benchmark kernel: op, geometry and arithmetic work."""

    name: str
    op: str  # conv2d | pool2d | dense
    params: dict
    flops: int
    models: str


def _same_pad(size: int, k: int, s: int, d: int) -> tuple[int, int]:
    out = math.ceil(size / s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def _conv(row: dict) -> tuple[dict, int]:
    ih, iw, ic, oc = (int(row[k]) for k in ("IH", "IW", "IC", "OC"))
    kh, kw, sh, sw = (int(row[k]) for k in ("KH", "KW", "SH", "SW"))
    # "0" in the CSV means no dilation, as in the profiler's reading (profiler/space.py)
    dh, dw = int(row.get("DH") or 1) or 1, int(row.get("DW") or 1) or 1
    pad_type = int(row.get("PT", row.get("PAT", 0)) or 0)
    top, bottom = _same_pad(ih, kh, sh, dh) if pad_type == 1 else (0, 0)
    left, right = _same_pad(iw, kw, sw, dw) if pad_type == 1 else (0, 0)
    # PH / PW are an axis's total explicit padding (MACE convention), split evenly
    ph, pw = int(row["PH"]), int(row["PW"])
    top, bottom = top + ph // 2, bottom + ph - ph // 2
    left, right = left + pw // 2, right + pw - pw // 2
    p = dict(x=(1, ic, ih, iw), w=(oc, ic, kh, kw), strides=(sh, sw), dilation=(dh, dw),
             padding=(top, left, bottom, right))
    oh = (ih + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (iw + left + right - dw * (kw - 1) - 1) // sw + 1
    return p, 2 * oc * oh * ow * ic * kh * kw


def load_specs(workloads: Path = WORKLOADS) -> list[KernelSpec]:
    """Distinct conv2d, pool2d and dense shapes of the workload files, in file order."""
    seen: dict[tuple, KernelSpec] = {}
    models: dict[tuple, set[str]] = {}

    def add(op: str, params: dict, flops: int, model: str) -> None:
        key = (op, tuple(sorted((k, str(v)) for k, v in params.items())))
        models.setdefault(key, set()).add(model)
        if key not in seen:
            seen[key] = KernelSpec(f"{op}_{len(seen):03d}", op, params, flops, "")

    with open(workloads / "conv2d.csv") as fh:
        for row in csv.DictReader(fh):
            params, flops = _conv(row)
            add("conv2d", params, flops, row["CNN"])
    with open(workloads / "pool2d.csv") as fh:
        for row in csv.DictReader(fh):
            p, _ = _conv(row)
            kind = "max" if int(row["POT"]) == 2 else "avg"
            params = dict(x=p["x"], kind=kind, pool_size=p["w"][2:], strides=p["strides"],
                          padding=p["padding"])
            oh = (p["x"][2] + p["padding"][0] + p["padding"][2] - p["w"][2]) // p["strides"][0] + 1
            ow = (p["x"][3] + p["padding"][1] + p["padding"][3] - p["w"][3]) // p["strides"][1] + 1
            add("pool2d", params, p["x"][1] * oh * ow * p["w"][2] * p["w"][3], row["CNN"])
    with open(workloads / "dense.csv") as fh:
        for row in csv.DictReader(fh):
            k = int(row["IH"]) * int(row["IW"]) * int(row["IC"])
            n = int(row["OC"])
            add("dense", dict(m=1, k=k, n=n), 2 * k * n, row["CNN"])
    return [dataclasses.replace(s, models="+".join(sorted(models[key])))
            for key, s in seen.items()]


def make_func(spec: KernelSpec):
    """The legalized PrimFunc of ``spec`` (compiler side only)."""
    from codl_tvm.schedules import testing as T

    p = dict(spec.params)
    if spec.op == "conv2d":
        return T.conv2d_func(p.pop("x"), p.pop("w"), **p)
    if spec.op == "pool2d":
        return T.pool2d_func(p.pop("x"), p.pop("kind"), **p)
    return T.matmul_func(p["m"], p["k"], p["n"])
