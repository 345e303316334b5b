"""benchmarks/k1s2_report.py: the committed report is what the script makes of the committed
runs, and its rule table scores the kernels it says it does."""

from __future__ import annotations

import json

import pytest
from helpers import ROOT, load_benchmark

report = load_benchmark("k1s2_report")
FOLDER = ROOT / "benchmarks" / "results" / "k1s2-h100"


def test_the_committed_report_is_made_from_the_committed_runs(tmp_path):
    out = tmp_path / "report.json"
    assert report.main([str(FOLDER), "--json", str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads((FOLDER / "k1s2-report.json").read_text())


def test_pairs_match_sub_ops_and_leave_the_controls_out():
    both = report.pairs(FOLDER / "k1s2.csv", FOLDER / "k1s2old.csv")
    assert len(both) >= 500
    for new, old in both:
        assert new["model"] != "control"
        assert (new["H"], new["IC"], new["OC"], new["dim"], new["ratio"]) == (
            old["H"], old["IC"], old["OC"], old["dim"], old["ratio"])


def test_the_rule_table_prices_never_as_the_direct_conv_and_always_as_the_gemm():
    g = report.gemm_vs_direct(FOLDER)
    assert g["rules"]["never (shipped)"]["over_direct_geomean"] == pytest.approx(1.0)
    assert g["rules"]["always"]["over_direct_geomean"] == pytest.approx(g["all"]["geomean"])
    assert g["rules"]["always"]["gemm_rows"] == g["all"]["n"]
