"""benchmarks/cpu_drift.py: a CPU-only model timed in phases, on real cpu-pair artifacts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import conv, load_benchmark, single_function

import codl_tvm
from codl_tvm import Plan

drift = load_benchmark("cpu_drift")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A bundle of one model with its cpu-only and gpu-only (the pair's second llvm device)
    artifacts, laid out as ``bench_models.py build`` writes them."""
    rng = np.random.default_rng(0)
    mod = codl_tvm.load_model(single_function(
        (1, 3, 16, 16), lambda bb, x: conv(bb, x, rng, 8, 3, padding=(1, 1, 1, 1))))
    pair = codl_tvm.DevicePair.preset("cpu-pair")
    root = tmp_path_factory.mktemp("bundle")
    for role in ("cpu", "gpu"):
        codl_tvm.compile(mod, pair, Plan.single(mod, role)).export(
            root / "tiny" / f"{role}-only", weights=False)
    return root


def test_phases_time_the_cpu_model_and_the_probe(bundle, tmp_path):
    out = tmp_path / "drift.json"
    assert drift.main([
        "run", str(bundle), "--model", "tiny", "--phases", "probe,alone,with-gpu",
        "--phase-s", "0.4", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["model"] == "tiny"
    assert [p["phase"] for p in doc["phases"]] == ["probe", "alone", "with-gpu"]
    for phase in doc["phases"]:
        ms = [m for _, m in phase["rows"]]
        assert phase["n"] == len(ms) > 0 and all(m > 0 for m in ms)
        assert phase["p10_ms"] <= phase["median_ms"] <= phase["p90_ms"]
        assert min(ms) <= min(phase["window_medians_ms"]) <= max(ms)

    merged = drift.report([out, out], tmp_path / "merged.json")
    assert len(merged["processes"]) == 2
    assert all("rows" not in p for proc in merged["processes"] for p in proc["phases"])
    assert json.loads((tmp_path / "merged.json").read_text()) == merged


def test_windows_split_the_calls_by_time():
    rows = [(0.1, 1.0), (0.2, 3.0), (3.5, 10.0), (7.0, 20.0), (7.1, 22.0)]
    s = drift.summary(rows)
    assert s["n"] == 5 and s["median_ms"] == 10.0
    assert s["window_medians_ms"] == [2.0, 10.0, 21.0]


def test_an_unknown_phase_is_one_clear_error(bundle, tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        drift.main(["run", str(bundle), "--phases", "alone,nap", "-o", str(tmp_path / "x.json")])
    assert err.value.code == 2
    assert "unknown phase(s): nap" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
