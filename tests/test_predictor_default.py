"""The shipped x86-cuda predictor: loadable, small, reproducible, blocking matches the kernels."""

from __future__ import annotations

import json
import math

import pytest

from codl_tvm.predictor import (
    DATA_DIR,
    CoDLPredictor,
    OpSpec,
    PredictorFileError,
    default_for,
    load,
    train,
)
from codl_tvm.predictor.base import sub_spec
from codl_tvm.predictor.blocking import gpu_gemm, terms
from codl_tvm.predictor.machine import reference
from codl_tvm.profiler import machine_facts, read_samples

SAMPLES = DATA_DIR / "samples-x86-cuda-h100.csv"


@pytest.fixture(scope="module")
def shipped() -> CoDLPredictor:
    pred = default_for("x86-cuda")
    assert isinstance(pred, CoDLPredictor)
    return pred


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return read_samples(SAMPLES)


def test_default_for_known_and_unknown_pairs(shipped):
    assert shipped.pair_ == "x86-cuda"
    assert default_for("cpu-pair") is None
    with pytest.raises(ValueError, match="device pair"):
        default_for(3)


def test_shipped_is_small_and_names_its_samples(shipped):
    assert shipped.size_bytes <= 4096  # units, sharing fits and every machine fact by name
    assert (DATA_DIR / shipped.trained_on_["samples"]).is_file()
    assert shipped.train_command == f"codl-tvm train {shipped.trained_on_['samples']}"


def _same_model(a, b, path: str = "model") -> None:
    """Equal structure and text; numbers equal to the 5 significant digits a file keeps (a
    BLAS build other than the one that trained the file may round the last one the other way)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _same_model(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same_model(x, y, f"{path}[{i}]")
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)):
        assert a == pytest.approx(b, rel=2e-4, abs=1e-12), path
    else:
        assert a == b, path


def test_shipped_is_what_training_gives(shipped, rows):
    # as `codl-tvm train SAMPLES` trains it: with the machine facts beside the file, if any
    again = train(rows, kind="codl", machine=machine_facts.beside(SAMPLES), source=SAMPLES)
    _same_model(again.to_json()["model"], shipped.to_json()["model"])
    assert again.trained_on_ == shipped.trained_on_


def test_json_round_trip_predicts_the_same(shipped, tmp_path):
    shipped.save(tmp_path / "p.json")
    back = load(tmp_path / "p.json")
    op = OpSpec("conv2d", 56, 56, 64, 128, 3, 3, pad=(1, 1, 1, 1))
    for dim in ("H", "OC"):
        assert back.predict_op(op, dim, 0.4) == shipped.predict_op(op, dim, 0.4)


def test_predict_op_is_eq2_on_real_model(shipped):
    op = OpSpec("conv2d", 52, 52, 256, 128, 1, 1)
    t = shipped.predict_op(op, "OC", 0.6)
    assert t["total_us"] == pytest.approx(t["share_us"] + max(t["cpu_us"], t["gpu_us"]))
    assert t["share_us"] > 0 and shipped.predict_op(op, "OC", 0.6, chain=True)["share_us"] == 0


def test_cpu_conv_tiles_match_recorded_blocking(rows):
    # the analytic register tile (ocb x x_tile) is the block the profiled kernel recorded
    m = reference()
    for r in rows:
        if r["role"] == "cpu" and r["algorithm"] == "direct-nchwc" and r["op"] == "conv2d":
            s = sub_spec(r)
            vecs = 2 if s.OC > m.lanes else 1
            assert m.lanes * vecs * min(14, s.out_w) == r["block"], r


def test_gpu_gemm_blocks_match_recorded_blocking(rows):
    m = reference()
    for r in rows:
        if r["role"] == "gpu" and r["algorithm"] == "implicit-gemm":
            s = sub_spec(r)
            blocks = gpu_gemm(s, m)[2]
            assert math.ceil(s.out_elems / blocks) == r["block"], r


def test_terms_cover_every_kernel_kind():
    m = reference()
    for fam in ("cpu", "gpu"):
        for op in (
            OpSpec("conv2d", 9, 9, 8, 40, 3, 3),
            OpSpec("depthwise", 9, 9, 8, 8, 3, 3, groups=8),
            OpSpec("pool_max", 9, 9, 8, 8, 2, 2, 2, 2),
            OpSpec("pool_avg", 9, 9, 8, 8, 2, 2, 2, 2),
            OpSpec("dense", 1, 1, 100, 70),
            OpSpec("elementwise", 9, 9, 8, 8),
        ):
            x = terms(fam, op, m)
            assert x[0] == 1.0 and all(v >= 0 for v in x)


def test_small_transfers_cost_what_the_h100_measured(shipped, rows):
    # regression: the transfer intercept was pinned to the 10 us sync, while a host-to-GPU
    # copy of a few KB took ~24 us there; the 2x underprediction moved tiny-cnn's last ops
    # to the CPU at a 3% loss
    for r in rows:
        if r["op"] in ("to_cpu", "to_gpu") and r["bytes"] <= 64 << 10:
            got = shipped.sharing_.cost(r["op"], r["role"], r["bytes"])
            assert got == pytest.approx(r["latency_us"], rel=0.2), r


def test_models_beyond_the_l2_predict_the_cold_cache_gemv(shipped):
    # ResNet-18's classifier: 512 -> 1000 (2 MB of weights, ragged last block)
    fc = OpSpec("dense", 1, 1, 512, 1000, 1, 1)
    l2 = shipped.machine_.l2_bytes
    assert shipped.in_model(l2) is shipped
    cold = shipped.in_model(l2 + 1)
    assert cold.machine_.l2_bytes == 0 and shipped.machine_.l2_bytes == l2
    assert cold.kernel_us("gpu", fc) > 1.2 * shipped.kernel_us("gpu", fc)
    assert cold.kernel_us("cpu", fc) == shipped.kernel_us("cpu", fc)


def test_gpu_predictions_keep_the_launch_floor(shipped, rows):
    """Regression: the GEMV model's t0 (3.8 us) put tiny GPU kernels under the
    H100's launch floor (400x192 rows take 4.8-5.5 us). Every GPU model keeps its fastest
    training sample as the least it predicts; CPU models keep a pure Eq. 3."""
    gemv = [r for r in rows if r["role"] == "gpu" and r["op"] == "dense" and r["IC"] == 400]
    key = "gpu/dense/dlight-reduction"
    floor = shipped.floor_us_[key]
    assert 4.4 < floor < 5.0
    assert all(p >= floor for p in shipped.predict(gemv))
    assert not any(k.startswith("cpu/") for k in shipped.floor_us_)


def test_a_floor_list_that_does_not_match_the_models_is_refused(shipped, tmp_path):
    doc = shipped.to_json()
    doc["model"]["floor"] = doc["model"]["floor"][:-1]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PredictorFileError, match="launch floors"):
        load(path)


def test_a_model_of_few_samples_takes_its_roles_launch_floor(rows):
    """Regression: a floor is a model's fastest training sample; a model of a few
    large samples (a quick profile) must not lift the floor of that kernel's small ops, so it
    takes its role's fastest sample instead."""
    avg = sorted((r for r in rows if r["role"] == "gpu" and r["op"] == "pool_avg"),
                 key=lambda r: r["latency_us"])  # fmt: skip
    few = [r for r in rows if not (r["role"] == "gpu" and r["op"] == "pool_avg")] + avg[-3:]
    pred = train(few, kind="codl")
    gpu_min = min(r["latency_us"] for r in few if r["role"] == "gpu" and r["model"] != "sharing")
    assert avg[-3]["latency_us"] > 20
    assert pred.floor_us_["gpu/pool_avg/pool"] == pytest.approx(gpu_min, rel=5e-3)
