"""benchmarks/interference.py: a guarded plan beside CPU hogs, on real cpu-pair artifacts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import conv, load_benchmark, single_function

import codl_tvm
from codl_tvm import Plan

interference = load_benchmark("interference")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """One model laid out as ``bench_models.py build --guard`` writes it: codl (guarded, its
    alternatives inside) and gpu-only."""
    rng = np.random.default_rng(0)
    mod = codl_tvm.load_model(single_function(
        (1, 3, 16, 16), lambda bb, x: conv(bb, x, rng, 8, 3, padding=(1, 1, 1, 1))))
    pair = codl_tvm.DevicePair.preset("cpu-pair")
    root = tmp_path_factory.mktemp("bundle")
    codl_tvm.compile(mod, pair, Plan.uniform(mod, "H", 0.5), guard=True).export(
        root / "tiny" / "codl", weights=False)
    codl_tvm.compile(mod, pair, Plan.single(mod, "gpu")).export(
        root / "tiny" / "gpu-only", weights=False)
    return root


def test_three_phases_with_hogs_in_the_middle(bundle, tmp_path, capsys):
    out = tmp_path / "interference.json"
    assert interference.main(["run", str(bundle), "--models", "tiny", "--hogs", "1",
                              "--phase-s", "0.3", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    phases = doc["models"]["tiny"]["phases"]
    assert [(p["phase"], p["hogs"]) for p in phases] == [
        ("quiet", 0), ("busy", 1), ("quiet-again", 0)]
    for p in phases:
        assert p["rounds"] > 0 and set(p["median_ms"]) == set(interference.RUNNERS)
        assert all(v > 0 for v in p["median_ms"].values())
        assert sum(p["adaptive_runs"].values()) == p["rounds"]  # one call a round
    table = interference.report(doc)
    assert table.count("| tiny |") == 3
    assert "| tiny | busy | 1 |" in capsys.readouterr().out


def test_a_model_not_in_the_bundle_is_one_clear_error(bundle, tmp_path, capsys):
    with pytest.raises(SystemExit):
        interference.main(["run", str(bundle), "--models", "nope", "-o", str(tmp_path / "x")])
    assert "no such model in the bundle" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_model_planned_on_one_processor_is_skipped(bundle, tmp_path, capsys):
    (tmp_path / "b" / "single").mkdir(parents=True)  # codl's plan ran on one processor
    assert interference.main(["run", str(tmp_path / "b"), "--models", "single",
                              "-o", str(tmp_path / "x.json")]) == 0
    assert "single: no codl artifact" in capsys.readouterr().out


def test_replay_runs_todays_policy_on_a_runs_figures():
    quiet = {"load-time guard": 10.0, "adaptive guard": 10.0, "gpu-only": 12.0}
    doc = {"models": {"m": {
        "load_time_choice": {"chosen": "plan", "latency_ms": {
            "plan": 10.0, "plan-step-0.25": 10.5, "gpu-only": 12.0, "cpu-only": 40.0}},
        "phases": [{"phase": "quiet", "median_ms": quiet},
                   {"phase": "busy", "median_ms": quiet | {"load-time guard": 200.0}},
                   {"phase": "quiet-again", "median_ms": quiet}]}}}
    row = interference.replay(doc).splitlines()[-1]
    cells = [c.strip() for c in row.strip("|").split("|")]
    # the host shows the spinning processes: one slowed call, then GPU-only; back at once
    assert cells[:3] == ["m", "20.0x", "2"]
    assert int(cells[3].split()[0]) <= 10 and cells[4] == "1"
