"""benchmarks/heldout_cnn_report.py: CNNs measured beside control rows, scored after the
lease factor the controls give; the committed ResNet report is what the script makes of the
committed run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import ROOT, load_benchmark

from codl_tvm.predictor import DATA_DIR, load, make
from codl_tvm.profiler import read_samples

report = load_benchmark("heldout_cnn_report")
RESNET = ROOT / "benchmarks" / "results" / "resnet-h100"
SAMPLES = DATA_DIR / "samples-x86-cuda-h100.csv"
PREDICTOR = DATA_DIR / "predictor-x86-cuda.json"


@pytest.fixture(scope="module")
def samples() -> list[dict]:
    return read_samples(SAMPLES)


def test_the_committed_report_is_made_from_the_committed_run(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert report.main([str(PREDICTOR), str(RESNET / "joined" / "rnjoin.csv"), str(SAMPLES),
                        "--json", str(out)]) == 0  # fmt: skip
    assert json.loads(out.read_text()) == json.loads((RESNET / "resnet-report.json").read_text())
    assert "| RESNET-50 | cpu |" in capsys.readouterr().out


def _as_new_cnn(rows: list[dict], model: str, factor: float) -> list[dict]:
    return [dict(r, model=model, latency_us=r["latency_us"] * factor) for r in rows]


def test_a_lease_twice_as_slow_is_calibrated_away(samples):
    """The file's own VGG-16 rows posing as a new CNN, and 120 + 80 of its rows as controls,
    all measured 'twice as slow': calibrated, the score is the predictor's on those rows."""
    vgg = [r for r in samples if r["model"] == "VGG-16"]
    rest = [r for r in samples if r["model"] == "random"]
    ctl = ([r for r in rest if r["role"] == "cpu"][:120]
           + [r for r in rest if r["role"] == "gpu"][:80])
    measured = _as_new_cnn(vgg, "NEW-CNN", 2.0) + _as_new_cnn(ctl, "control", 2.0)
    pred = load(PREDICTOR)
    rep = report.score(pred, {"flops": make("flops").fit(samples)}, measured, samples)
    assert rep["lease"]["cpu"]["median"] == pytest.approx(2.0)
    assert set(rep["cnns"]) == {"NEW-CNN"}
    for role in ("cpu", "gpu"):
        mine = [r for r in vgg if r["role"] == role]
        want = np.mean(np.abs(np.array(pred.predict(mine))
                              / np.array([r["latency_us"] for r in mine]) - 1) <= 0.1)
        got = rep["cnns"]["NEW-CNN"][role]
        assert got["calibrated"]["acc10"] == pytest.approx(want)
        assert got["raw"]["acc10"] < got["calibrated"]["acc10"]
        assert got["calibrated"]["n"] == len(mine)


def test_too_few_controls_is_one_clear_stop(samples):
    vgg = [r for r in samples if r["model"] == "VGG-16"]
    with pytest.raises(SystemExit, match="fewer than 20 control rows"):
        report.score(load(PREDICTOR), {}, _as_new_cnn(vgg, "NEW-CNN", 1.0), samples)
