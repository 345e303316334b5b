"""benchmarks/instance_report.py: the predictor judged on its test rows measured again on
another instance of the machine."""

from __future__ import annotations

import pytest
from helpers import load_benchmark

from codl_tvm.predictor import DATA_DIR
from codl_tvm.profiler import read_samples

instance = load_benchmark("instance_report")


@pytest.fixture(scope="module")
def rows():
    return read_samples(DATA_DIR / "samples-x86-cuda-h100.csv")


def _slower(rows, factor: float, every: int = 0):
    """The rows as a instance ``factor`` times slower on the CPU measured them; with ``every``,
    each ``every``-th CPU row also 1.5x slower still (a row the instances disagree on)."""
    out = []
    for i, r in enumerate(rows):
        f = factor * (1.5 if every and i % every == 0 else 1.0) if r["role"] == "cpu" else 1.0
        out.append(dict(r, latency_us=r["latency_us"] * f))
    return out


def test_a_uniformly_slower_instance_scores_the_same_once_calibrated(rows, capsys):
    rep = instance.report(rows, _slower(rows, 1.3), seeds=1)
    assert rep["instance_factors"]["cpu"] == pytest.approx(1.3)
    assert rep["instance_factors"]["gpu"] == pytest.approx(1.0)
    for s in rep["sets"].values():
        assert s["other_calibrated"] == pytest.approx(s["this_instance"])
        assert s["reproduce10"] == 1.0
        assert s["other_raw"] < s["this_instance"]  # 30% slower: hardly a row within +-10%
    instance.print_report(rep)
    assert "held-out YOLO-V2" in capsys.readouterr().out


def test_rows_the_instances_disagree_on_lower_the_ceiling(rows):
    rep = instance.report(rows, _slower(rows, 1.0, every=5), seeds=1)
    whole = rep["sets"]["whole file, in-sample"]
    assert whole["reproduce10"] == pytest.approx(0.8, abs=0.02)
    assert whole["other_calibrated"] <= whole["reproduce10"]


def test_files_without_shared_rows_are_one_clear_error(rows):
    with pytest.raises(SystemExit, match="share no rows"):
        instance.instance_factors(rows[:5], {})


def test_cli_writes_the_json(tmp_path, rows):
    import csv
    import json

    other = tmp_path / "other.csv"
    with open(DATA_DIR / "samples-x86-cuda-h100.csv", newline="") as f:
        reader = csv.DictReader(f)
        kept = [r for r in reader if r["model"] == "VGG-16"]
        columns = reader.fieldnames
    with open(other, "w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(kept)
    out = tmp_path / "rep.json"
    assert instance.main([str(DATA_DIR / "samples-x86-cuda-h100.csv"), str(other), "--seeds", "1",
                       "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["sets"]["held-out VGG-16"]["reproduce10"] == 1.0
    assert doc["sets"]["held-out YOLO-V2"] == {"n": 0, "this_instance": None, "reproduce10": None,
                                               "other_calibrated": None, "other_raw": None}

