"""benchmarks/heldout_cnn_report.py: CNNs measured beside control rows, scored after the
instance factor the controls give; the command writes the scores of a measured file the test
builds."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from helpers import load_benchmark

from codl_tvm.predictor import DATA_DIR, load, make
from codl_tvm.profiler import read_samples

report = load_benchmark("heldout_cnn_report")
SAMPLES = DATA_DIR / "samples-x86-cuda-h100.csv"
PREDICTOR = DATA_DIR / "predictor-x86-cuda.json"


@pytest.fixture(scope="module")
def samples() -> list[dict]:
    return read_samples(SAMPLES)


def _close(a, b) -> bool:
    """Equal structure, numbers within a relative 1e-9."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == pytest.approx(b, rel=1e-9)
    return a == b


def test_main_writes_the_scores_of_the_measured_file(tmp_path, capsys):
    """A run of the file's own VGG-16 rows as a new CNN beside 120 + 80 control rows, all
    measured 1.5x slow: the JSON is :func:`score` of those rows, the tables name the CNN."""
    with SAMPLES.open(newline="") as f:
        reader = csv.DictReader(f)
        raw, columns = list(reader), list(reader.fieldnames)
    vgg = [dict(r, model="NEW-CNN") for r in raw if r["model"] == "VGG-16"]
    rest = [r for r in raw if r["model"] == "random"]
    ctl = ([r for r in rest if r["role"] == "cpu"][:120]
           + [r for r in rest if r["role"] == "gpu"][:80])
    ctl = [dict(r, model="control") for r in ctl]
    measured = tmp_path / "measured.csv"
    with measured.open("w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(dict(r, latency_us=repr(1.5 * float(r["latency_us"]))) for r in vgg + ctl)
    out = tmp_path / "r.json"
    assert report.main([str(PREDICTOR), str(measured), str(SAMPLES), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| NEW-CNN | cpu |" in text and "| NEW-CNN | gpu |" in text
    got = json.loads(out.read_text())
    assert set(got["cnns"]) == {"NEW-CNN"}
    for role, n in (("cpu", 120), ("gpu", 80)):
        speed = got["instance"][role]
        assert speed["n"] == n and speed["median"] == pytest.approx(1.5)
    rows = read_samples(SAMPLES)
    baselines = {k: make(k).fit(rows) for k in report.BASELINES}
    want = report.score(load(PREDICTOR), baselines, read_samples(measured), rows)
    assert _close(got, json.loads(json.dumps(want)))


def _as_new_cnn(rows: list[dict], model: str, factor: float) -> list[dict]:
    return [dict(r, model=model, latency_us=r["latency_us"] * factor) for r in rows]


def test_a_instance_twice_as_slow_is_calibrated_away(samples):
    """The file's own VGG-16 rows posing as a new CNN, and 120 + 80 of its rows as controls,
    all measured 'twice as slow': calibrated, the score is the predictor's on those rows."""
    vgg = [r for r in samples if r["model"] == "VGG-16"]
    rest = [r for r in samples if r["model"] == "random"]
    ctl = ([r for r in rest if r["role"] == "cpu"][:120]
           + [r for r in rest if r["role"] == "gpu"][:80])
    measured = _as_new_cnn(vgg, "NEW-CNN", 2.0) + _as_new_cnn(ctl, "control", 2.0)
    pred = load(PREDICTOR)
    rep = report.score(pred, {"flops": make("flops").fit(samples)}, measured, samples)
    assert rep["instance"]["cpu"]["median"] == pytest.approx(2.0)
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
