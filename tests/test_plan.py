"""Plans: JSON round trip, uniform plans, and one clear error for each kind of bad plan."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import conv, single_function
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm.relax import op as rop

import codl_tvm
from codl_tvm import Chain, OpPlacement, Plan, PlanError


def _model():
    rng = np.random.default_rng(0)

    def body(bb, x):
        x = conv(bb, x, rng, 4, 3, padding=(1, 1, 1, 1), bias=True)
        x = conv(bb, x, rng, 4, 3, padding=(1, 1, 1, 1))
        return bb.emit(rop.nn.max_pool2d(x, (2, 2), (2, 2)))

    return codl_tvm.load_model(single_function((1, 3, 8, 8), body))


def test_op_ids_are_stable_for_the_same_model():
    assert [o["id"] for o in codl_tvm.list_ops(_model())] == ["conv2d_0", "conv2d_1",
                                                             "max_pool2d_0"]
    first, again = Plan.uniform(_model(), "H", 0.5), Plan.uniform(_model(), "H", 0.5)
    assert first.fingerprint == again.fingerprint


MODEL = _model()


@settings(max_examples=30, deadline=None)
@given(dim=st.sampled_from(["H", "OC"]), ratio=st.floats(0, 1), chain=st.booleans())
def test_plan_round_trips_through_json(tmp_path_factory, dim, ratio, chain):
    mod = MODEL
    plan = Plan.uniform(mod, dim, ratio, chain=chain)
    path = tmp_path_factory.mktemp("plans") / "plan.json"
    plan.save(path)
    again = Plan.load(path)
    assert again.to_json() == plan.to_json()
    again.validate(mod)


def test_uniform_chain_groups_consecutive_ops():
    plan = Plan.uniform(_model(), "H", 0.5, chain=True)
    assert [c.ops for c in plan.chains] == [["conv2d_0", "conv2d_1", "max_pool2d_0"]]


def test_uniform_chains_only_the_ops_it_splits():
    """A squeeze-and-excitation tail (global pool, 1x1 convs on one pixel) has one row: those
    ops stay whole, so no chain may hold them (compile warned once per op before)."""
    import warnings

    rng = np.random.default_rng(0)

    def body(bb, x):
        x = conv(bb, x, rng, 8, 3, padding=(1, 1, 1, 1))
        x = bb.emit(rop.nn.avg_pool2d(x, (8, 8), (8, 8)))
        x = conv(bb, x, rng, 4, 1)
        return conv(bb, x, rng, 8, 1)

    mod = codl_tvm.load_model(single_function((1, 3, 8, 8), body))
    plan = Plan.uniform(mod, "H", 0.5, chain=True)
    assert list(plan.ops) == ["conv2d_0"] and plan.chains == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"), plan)


BAD_PLANS = [
    ({"format": "something-else"}, "not a codl-tvm plan"),
    ({"format": "codl-tvm-plan", "version": 99}, "plan version 99"),
    ({"format": "codl-tvm-plan", "version": 1, "ops": {"conv2d_0": {"place": "tpu"}}},
     "'place' must be one of"),
    ({"format": "codl-tvm-plan", "version": 1,
      "ops": {"conv2d_0": {"place": "split", "dim": "W", "ratio": 0.5}}}, "split 'dim'"),
    ({"format": "codl-tvm-plan", "version": 1,
      "ops": {"conv2d_0": {"place": "split", "dim": "H", "ratio": 1.5}}}, "outside"),
    ({"format": "codl-tvm-plan", "version": 1,
      "ops": {"conv2d_0": {"place": "split", "dim": "H", "ratio": "half"}}}, "must be a number"),
    ({"format": "codl-tvm-plan", "version": 1, "chains": [{"ops": ["conv2d_0"], "dim": "H",
                                                          "ratio": 0.5}]}, "at least two"),
]


@pytest.mark.parametrize("doc, message", BAD_PLANS)
def test_malformed_plan_files_name_the_problem(tmp_path, doc, message):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match=message):
        Plan.load(path)


def test_broken_json_and_missing_file(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("{not json")
    with pytest.raises(PlanError, match="not valid JSON"):
        Plan.load(path)
    with pytest.raises(PlanError, match="does not exist"):
        Plan.load(tmp_path / "missing.json")


def test_validate_rejects_unknown_ops_wrong_model_and_double_chains():
    mod = _model()
    with pytest.raises(PlanError, match="unknown op 'dense_3'"):
        Plan(ops={"dense_3": OpPlacement("gpu")}).validate(mod)
    with pytest.raises(PlanError, match="different model"):
        Plan(fingerprint="0" * 16).validate(mod)
    twice = [Chain(["conv2d_0", "conv2d_1"], "H", 0.5), Chain(["conv2d_1", "max_pool2d_0"], "H",
                                                              0.5)]
    with pytest.raises(PlanError, match="more than one chain"):
        Plan(chains=twice).validate(mod)


def test_compile_rejects_a_bad_plan_before_building():
    mod = _model()
    pair = codl_tvm.DevicePair.preset("cpu-pair")
    with pytest.raises(PlanError, match="unknown op"):
        codl_tvm.compile(mod, pair, Plan(ops={"conv2d_9": OpPlacement("cpu")}))


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    Plan.uniform(_model(), "H", 0.5).save(path)
    before = path.read_text()

    real_write = Path.write_text

    def explode(self, text, *args, **kwargs):
        real_write(self, text[: len(text) // 2])  # half written, then the disk is full
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_text", explode)
    with pytest.raises(OSError):
        Plan.uniform(_model(), "OC", 0.1).save(path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]
