"""Predictors: Eq. 3 recovery, Eq. 2 composition, JSON files, bad input, sklearn conventions."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from sklearn.base import clone

from codl_tvm.predictor import (
    FORMAT_VERSION,
    KINDS,
    OpSpec,
    OutOfRangeWarning,
    PredictorFileError,
    load,
    make,
    train,
)
from codl_tvm.predictor.accuracy import accuracy_rows, report, split_rows
from codl_tvm.profiler import space

# a synthetic processor that follows CoDL Eq. 3 exactly: GPU blocks of 256 outputs over 8 cores,
# warps of 32; CPU split evenly over 2 cores with 8-wide SIMD units
BLOCKING = {"gpu": ("gpu-direct", 256, 32, 8), "cpu": ("cpu-direct", 0, 8, 2)}
T_UNIT = {"gpu": (0.002, 0.0004), "cpu": (0.01, 0.003)}  # us per unit: a + b * reduction


def eq3_us(role: str, sub: OpSpec) -> float:
    _, block, unit, cores = BLOCKING[role]
    size = block or math.ceil(sub.out_elems / cores)
    steps = math.ceil(math.ceil(sub.out_elems / size) / cores) * math.ceil(size / unit)
    a, b = T_UNIT[role]
    return 3.0 + steps * (a + b * sub.reduction)


def synthetic_rows(n_specs: int = 60, seed: int = 0, pair: str = "cpu-pair") -> list[dict]:
    specs = space.sample_specs(n_specs, seed, max_flops=1e9, kinds=["conv2d", "pool_max", "dense"])
    rows = []
    for job in space.compute_jobs(specs, (0.2, 0.5, 0.9, 1.0)):
        row = job.row(pair, {"kind": "llvm"})
        algo, block, unit, cores = BLOCKING[job.role]
        row.update(algorithm=algo, block=block, unit=unit, cores=cores, spread_us=0.0, repeat=3,
                   latency_us=eq3_us(job.role, job.sub))  # fmt: skip
        rows.append(row)
    for job in space.sharing_jobs(6, 1 << 22):
        row = job.row(pair, {"kind": "llvm"})
        lat = 20.0 if job.op == "sync" else (20.0 + 1e-3 * row["bytes"])
        if job.op in ("slice", "concat"):
            lat = 2.0 + 5e-4 * row["bytes"]
        row.update(algorithm="copy", block=0, unit=1, cores=1, spread_us=0.0, repeat=3,
                   latency_us=lat)  # fmt: skip
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def rows():
    return synthetic_rows()


def test_codl_recovers_eq3(rows):
    train_rows, test_rows = split_rows(rows, 0.3, seed=1)
    p = make("codl").fit(train_rows)
    for r in accuracy_rows(p, test_rows):
        assert r["acc10"] == 1.0 and r["mape"] < 1e-3, r
    assert p.size_bytes <= 2048


def test_codl_beats_flops_on_eq3_data(rows):
    train_rows, test_rows = split_rows(rows, 0.3, seed=1)
    acc = {}
    for kind in ("codl", "flops", "eop"):
        rep = accuracy_rows(make(kind).fit(train_rows), test_rows)
        acc[kind] = {r["processor"]: r["acc10"] for r in rep if r["op"] == "all"}
    for role in ("cpu", "gpu"):
        assert acc["codl"][role] >= acc["flops"][role] and acc["codl"][role] >= acc["eop"][role]


def test_predict_op_is_eq2(rows):
    p = make("codl").fit(rows)
    op = OpSpec("conv2d", 30, 30, 16, 64, 3, 3, pad=(1, 1, 1, 1))
    t = p.predict_op(op, "H", 0.6)
    assert t["total_us"] == pytest.approx(t["share_us"] + max(t["cpu_us"], t["gpu_us"]))
    assert t["gpu_us"] == pytest.approx(eq3_us("gpu", op.part("gpu", "H", 0.6)), rel=1e-3)
    # sharing: input part to the CPU, its output back, slices and the concat
    cpu = op.part("cpu", "H", 0.6)
    expect = 40 + 1e-3 * (cpu.in_bytes + cpu.out_bytes)
    expect += 3 * 2.0 + 5e-4 * (cpu.in_bytes + op.part("gpu", "H", 0.6).in_bytes + op.out_bytes)
    assert t["share_us"] == pytest.approx(expect, rel=1e-3)
    assert p.predict_op(op, "H", 0.6, chain=True)["share_us"] == 0
    alone = p.predict_op(op, "OC", 1.0)
    assert alone["cpu_us"] == 0 and alone["share_us"] == 0
    cpu_only = p.predict_op(op, "OC", 0.0)
    assert cpu_only["gpu_us"] == 0 and cpu_only["share_us"] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_json_round_trip(rows, kind, tmp_path):
    p = train(rows, kind=kind, output=tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["kind"] == kind and doc["version"] == FORMAT_VERSION and doc["pair"] == "cpu-pair"
    q = load(tmp_path / "p.json")
    np.testing.assert_allclose(q.predict(rows), p.predict(rows), rtol=2e-3)
    assert q.get_params() == p.get_params()
    assert clone(p).get_params() == p.get_params()
    assert p.size_bytes == len((tmp_path / "p.json").read_text())


def test_gbdt_matches_sklearn(rows):
    p = make("gbdt", n_estimators=20).fit(rows)
    assert p.forest_["gpu"]["trees"] and isinstance(p.forest_["gpu"]["trees"][0][0], list)
    comp = [r for r in rows if r["op"] == "conv2d"]
    assert np.all(p.predict(comp) > 0)


def test_bad_files(rows, tmp_path):
    path = tmp_path / "p.json"
    train(rows, kind="flops", output=path)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "version": 99}))
    with pytest.raises(PredictorFileError, match="version 99"):
        load(path)
    path.write_text(json.dumps({**doc, "kind": "nn-meter"}))
    with pytest.raises(PredictorFileError, match="unknown predictor kind 'nn-meter'"):
        load(path)
    path.write_text("\x80\x04 pickle")
    with pytest.raises(PredictorFileError, match="not a predictor JSON"):
        load(path)
    with pytest.raises(ValueError, match="unknown predictor kind"):
        make("lstm")


def test_out_of_range_and_unknown_ops_warn_or_fail(rows):
    p = make("codl").fit(rows)
    big = OpSpec("conv2d", 4000, 4000, 16, 64, 3, 3, pad=(1, 1, 1, 1))
    with pytest.warns(OutOfRangeWarning, match="is outside the trained range"):
        p.predict_op(big, "H", 0.5)
    with pytest.raises(ValueError, match="no samples of depthwise on"):
        p.predict_op(OpSpec("depthwise", 8, 8, 8, 8, 3, 3, groups=8), "H", 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p.predict_op(OpSpec("conv2d", 20, 20, 16, 64, 3, 3, pad=(1, 1, 1, 1)), "H", 0.5)


def test_fit_refuses_mixed_pairs(rows):
    other = synthetic_rows(5, seed=3, pair="x86-cuda")
    with pytest.raises(ValueError, match="several device pairs"):
        make("codl").fit(rows + other)
    with pytest.raises(ValueError, match="no samples"):
        make("codl").fit([])


def test_report_has_rows_per_processor_and_op(rows):
    rep = report(make("codl").fit(rows), rows)
    keys = {(r["processor"], r["op"]) for r in rep["rows"]}
    assert {("gpu", "conv2d"), ("cpu", "dense"), ("cpu", "all"), ("cpu", "to_cpu")} <= keys
    assert all(set(r) >= {"processor", "op", "n", "acc10", "mape"} for r in rep["rows"])
    assert rep["size_bytes"] > 0 and rep["predict_us_per_op"] > 0


def test_report_function_survives_importing_its_module():
    """Regression: a submodule named ``report`` used to replace ``predictor.report()``."""
    import codl_tvm.predictor as predictor
    import codl_tvm.predictor.accuracy  # noqa: F401

    assert callable(predictor.report)


def test_compact_json_is_json_with_short_exponents():
    """The 2 KB budget counts bytes: exponents lose their zero padding, values stay exact."""
    from codl_tvm.predictor.file_format import compact_json

    doc = {"t": [8.481e-05, 1.0, 0, 2.5e20, -3e-7], "s": "e-05 stays", "n": None}
    text = compact_json(doc)
    assert "e-05" not in text.replace('"e-05 stays"', "") and "8.481e-5" in text
    assert json.loads(text) == doc and " " not in text.replace("e-05 stays", "")


def test_block_copies_are_priced_from_their_samples_or_as_the_slice_they_replace():
    from codl_tvm.predictor.sharing import SharingModel

    def rows(op, role, us_per_mb, base):
        return [{"op": op, "role": role, "bytes": mb << 20, "latency_us": base + us_per_mb * mb}
                for mb in (1, 2, 4, 8)]

    slices = rows("slice", "gpu", 50.0, 5.0)
    old = SharingModel().fit(slices)
    assert old.cost("copy_gpu", "gpu", 4 << 20) == pytest.approx(old.cost("slice", "gpu", 4 << 20))
    new = SharingModel().fit(slices + rows("copy_gpu", "gpu", 5.0, 3.0))
    assert new.cost("copy_gpu", "gpu", 4 << 20) == pytest.approx(23.0, rel=0.05)
