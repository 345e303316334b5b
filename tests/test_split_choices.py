"""benchmarks/split_choices.py: a predictor's split choices judged on measured splits. Where
the "measurements" are a predictor's own prices, that predictor chooses the best split of
every shape, and another one can do no better."""

from __future__ import annotations

import json
import warnings

import pytest
from helpers import load_benchmark

from codl_tvm.predictor import DATA_DIR, load

choices = load_benchmark("split_choices")
SHAPES = ("104x104x64-128-k3s1", "26x26x256-512-k3s1", "13x13x1024-1024-k3s1")
SPLITS = [("H", r) for r in (0.5, 0.7, 0.8, 0.9)] + [("OC", r) for r in (0.5, 0.625, 0.75)]


def _measured_by(pred_path) -> dict:
    """A coexec result whose every latency is ``pred_path``'s price, as the script prices."""
    import codl_tvm
    from codl_tvm.planner.api import for_pair
    from codl_tvm.planner.costs import PredictorCosts
    from codl_tvm.planner.search import Evaluator

    pair = codl_tvm.DevicePair("x86-cuda", {"kind": "llvm", "num-cores": 16},
                               {"kind": "cuda", "arch": "sm_90"})  # fmt: skip
    ev = Evaluator(for_pair(PredictorCosts(load(pred_path)), pair))
    variants = []
    for shape in SHAPES:
        n = choices.node(shape)
        variants += [{"shape": shape, "variant": f"{role}-only",
                      "latency_ms": ev.whole(n, role) / 1e3} for role in ("cpu", "gpu")]
        variants += [{"shape": shape, "variant": f"{d}@{r:g}",
                      "latency_ms": ev.unit([n], d, r).total_us / 1e3} for d, r in SPLITS]
    return {"variants": variants}


def test_the_predictor_that_priced_the_splits_chooses_the_best(tmp_path, capsys) -> None:
    truth = load(DATA_DIR / "predictor-x86-cuda.json")
    truth._use_machine({"gpu_sms": 8})  # what calibrate would store: 8 SMs, passes 4x as slow
    truth.speed_ = {"gpu-passes": 4.0}
    truth.save(tmp_path / "truth.json")
    load(DATA_DIR / "predictor-x86-cuda.json").save(tmp_path / "shipped.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (tmp_path / "coexec.json").write_text(json.dumps(_measured_by(tmp_path / "truth.json")))
        out = tmp_path / "choices.json"
        assert choices.main([str(tmp_path / "coexec.json"), str(tmp_path / "truth.json"),
                             str(tmp_path / "shipped.json"), "-o", str(out)]) == 0
    doc = json.loads(out.read_text())["predictors"]
    own = doc["truth.json"]["1"]
    assert own["speedup"] == pytest.approx(own["ceiling"])
    assert all(r["gpu_pred_over_meas"] == pytest.approx(1.0) for r in own["rows"])
    assert doc["shipped.json"]["1"]["speedup"] <= own["speedup"] + 1e-9
    assert "| truth.json | 1 |" in capsys.readouterr().out
