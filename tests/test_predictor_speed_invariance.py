"""The predictor's speed work (issue 4: predict_op <= 50 us) changed no prediction.

``tests/data/predictor-speed-invariance.json`` was recorded with the code *before* that work
(``OpSpec`` as a frozen dataclass, the mirror rescanning its tables on every call). This test
recomputes everything with the code now and wants the same values to 1e-12 relative:

- the sub-ops ``OpSpec.part`` gives (both roles, dims H and OC, six ratios);
- the kernel the dispatch mirror picks for every sub-op, on three machines, under every GPU
  conv variant and with GPU Winograd off;
- ``predict_op`` (cpu, gpu, share, total) of the codl, flops and eop predictors trained on the
  shipped H100 samples, chain on and off, and their ``predict`` of every sample row.

A *modelling* change (new terms in ``blocking.py``, another sharing fit) changes these values
by design: record again, on the code just before the speed change being checked, with
``PYTHONPATH=<that tree> python tests/test_predictor_speed_invariance.py --record``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from codl_tvm import tiling
from codl_tvm.predictor import DATA_DIR, make
from codl_tvm.predictor.accuracy import _full_ops
from codl_tvm.predictor.base import sub_spec
from codl_tvm.predictor.mirror import Machine, kernel
from codl_tvm.predictor.opspec import SHARING_KINDS, SPLIT_DIMS, OpSpec
from codl_tvm.profiler import read_samples

FIXTURE = Path(__file__).parent / "data" / "predictor-speed-invariance.json"
SAMPLES = DATA_DIR / "samples-x86-cuda-h100.csv"
KINDS = ("codl", "flops", "eop")
RATIOS = (0.0, 0.1, 0.3, 0.5, 0.77, 1.0)
CHAIN_RATIOS = (0.3, 0.77)  # chain=True: no sharing cost
MACHINES = (Machine(), Machine(cores=4, lanes=8, sms=4), Machine(cores=2, lanes=4, sms=84))
N_OPS = 320
REL = 1e-12


def pick_ops(rows: list[dict[str, Any]]) -> list[OpSpec]:
    """Every distinct unsplit op of the samples, then distinct sub-ops they measured."""
    comp = [r for r in rows if r["op"] not in SHARING_KINDS]
    seen: dict[str, OpSpec] = {}
    for op in [*_full_ops(comp), *(sub_spec(r) for r in comp)]:
        seen.setdefault(json.dumps(op.to_json(), sort_keys=True), op)
    return list(seen.values())[:N_OPS]


def cases(op: OpSpec) -> list[tuple[str, float, bool]]:
    out = []
    for dim in SPLIT_DIMS[op.kind]:
        out += [(dim, r, False) for r in RATIOS] + [(dim, r, True) for r in CHAIN_RATIOS]
    return out


def _spec(s: OpSpec | None) -> list[Any] | None:
    if s is None:
        return None
    return [s.kind, s.H, s.W, s.IC, s.OC, s.KH, s.KW, s.SH, s.SW, list(s.pad), s.dilation,
            s.groups, s.out_h, s.out_w, s.in_bytes, s.out_bytes, s.reduction, s.flops]  # fmt: skip


def _kernel(family: str, s: OpSpec, m: Machine) -> list[Any]:
    k = kernel(family, s, m)
    return [k.algorithm, k.num_blocks, k.split, k.sum_blocks, [list(g) for g in k.grid]]


def _digest(values: Any) -> str:
    return hashlib.sha256(json.dumps(values).encode()).hexdigest()


def _op_digests(ops: list[OpSpec]) -> tuple[list[str], list[OpSpec]]:
    """Per op: digest of its parts and of their kernels (three machines); the distinct parts."""
    digests, subs = [], {}
    for op in ops:
        got = []
        for dim, ratio, _ in cases(op):
            for role in ("cpu", "gpu"):
                p = op.part(role, dim, ratio)
                got.append(_spec(p))
                if p is not None:
                    got.append([_kernel(f, p, m) for f in ("cpu", "gpu") for m in MACHINES])
                    subs.setdefault(json.dumps(p.to_json(), sort_keys=True), p)
        digests.append(_digest(got)[:16])
    return digests, list(subs.values())


def _variant_digests(subs: list[OpSpec]) -> dict[str, str]:
    """GPU kernels of every distinct part under each conv variant and with Winograd off."""
    out = {}
    for variant in [*tiling.VARIANTS, tiling.DECLINE]:
        with tiling.use_variant(variant):
            out[variant] = _digest([_kernel("gpu", s, MACHINES[0]) for s in subs])
    old = os.environ.get(tiling.WINOGRAD_ENV)
    os.environ[tiling.WINOGRAD_ENV] = "0"
    try:
        out["no-gpu-winograd"] = _digest([_kernel("gpu", s, MACHINES[0]) for s in subs])
    finally:
        if old is None:
            del os.environ[tiling.WINOGRAD_ENV]
        else:
            os.environ[tiling.WINOGRAD_ENV] = old
    return out


def compute(rows: list[dict[str, Any]], ops: list[OpSpec]) -> dict[str, Any]:
    """Everything the fixture holds, computed with the code imported now."""
    out: dict[str, Any] = {"ops": [op.to_json() for op in ops]}
    out["parts_kernels"], subs = _op_digests(ops)
    out["variants"] = _variant_digests(subs)
    for kind in KINDS:
        pred = make(kind).fit(rows)
        res = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for op in ops:
                for dim, ratio, chain in cases(op):
                    t = pred.predict_op(op, dim, ratio, chain)
                    res.append([t["cpu_us"], t["gpu_us"], t["share_us"], t["total_us"]])
            predicted = [float(v) for v in pred.predict(rows)]
        out[f"{kind}.total_us"] = [t[3] for t in res]
        out[f"{kind}.predict_op"] = _digest(res)  # all four numbers, exactly
        out[f"{kind}.predict"] = _digest(predicted)
        if kind == "codl":
            out[f"{kind}.predict_rows"] = predicted
    return out


def record() -> None:
    rows = read_samples(SAMPLES)
    FIXTURE.write_text(json.dumps(compute(rows, pick_ops(rows)), separators=(",", ":")))


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=REL, abs_tol=0.0)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.fixture(scope="module")
def now_and_then() -> tuple[dict[str, Any], dict[str, Any]]:
    ref = json.loads(FIXTURE.read_text())
    ops = [OpSpec.from_json(d) for d in ref["ops"]]
    return compute(read_samples(SAMPLES), ops), ref


def test_fixture_covers_every_op_kind(now_and_then):
    _, ref = now_and_then
    kinds = {d["kind"] for d in ref["ops"]}
    assert kinds == {"conv2d", "depthwise", "dense", "pool_max", "pool_avg", "elementwise"}
    assert len(ref["ops"]) >= 300


def test_parts_and_kernels_unchanged(now_and_then):
    now, ref = now_and_then
    bad = [i for i, (a, b) in enumerate(zip(now["parts_kernels"], ref["parts_kernels"],
                                            strict=True)) if a != b]  # fmt: skip
    assert not bad, f"parts or kernels of {len(bad)} ops differ, first: {ref['ops'][bad[0]]}"
    assert now["variants"] == ref["variants"]


def test_parts_equal_checked_construction(now_and_then):
    """``part`` builds sub-ops without validating: each equals the checked constructor's, sizes
    and cached conv shape included, even when the parent's were cached first."""
    _, ref = now_and_then
    derived = ("out_h", "out_w", "out_elems", "reduction", "in_bytes", "out_bytes", "flops",
               "conv_shape")  # fmt: skip
    for doc in ref["ops"]:
        op = OpSpec.from_json(doc)
        _ = op.conv_shape, op.memo.setdefault("parent", 1)
        for dim, ratio, _chain in cases(op):
            for role in ("cpu", "gpu"):
                p = op.part(role, dim, ratio)
                if p is None:
                    continue
                q = OpSpec.from_json(p.to_json())
                assert p == q and hash(p) == hash(q) and repr(p) == repr(q)
                assert [getattr(p, a) for a in derived] == [getattr(q, a) for a in derived]
                assert "parent" not in p.memo


def test_part_of_padding_rows_is_refused():
    # output row 0 reads input rows -3..-1: all padding, as before a clear error
    op = OpSpec("conv2d", 4, 4, 1, 1, 3, 3, pad=(3, 3, 3, 3))
    with pytest.raises(ValueError, match="sizes must be positive"):
        op.part("gpu", "H", 0.1)


@pytest.mark.parametrize("key", [*(f"{k}.total_us" for k in KINDS), "codl.predict_rows"])
def test_values_unchanged(now_and_then, key):
    now, ref = now_and_then
    a, b = now[key], ref[key]
    assert len(a) == len(b)
    bad = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if not _close(x, y)]
    assert not bad, f"{key}: {len(bad)} of {len(a)} differ, first {bad[0]}: " + (
        f"{a[bad[0]]} != {b[bad[0]]} (a modelling change? see the module docstring)"
    )


@pytest.mark.parametrize("key", [f"{k}.{w}" for k in KINDS for w in ("predict_op", "predict")])
def test_digests_unchanged(now_and_then, key):
    """Every cpu/gpu/share/total of predict_op and every sample row's prediction, bit for bit."""
    now, ref = now_and_then
    assert now[key] == ref[key]


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    record()
