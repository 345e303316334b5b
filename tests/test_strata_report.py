"""benchmarks/strata_report.py on the committed strata: the figures PREDICTOR.md quotes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import ROOT, load_benchmark

from codl_tvm.predictor import DATA_DIR, load

strata_report = load_benchmark("strata_report")
RESULTS = ROOT / "benchmarks" / "results"
POINTWISE = RESULTS / "pointwise-h100" / "pointwise-samples.csv"
POINTWISE_DIRECT = RESULTS / "pointwise-h100" / "pointwise-direct-k1.csv"
PROBE = RESULTS / "probe-h100" / "probe.csv"
SHIPPED = DATA_DIR / "predictor-x86-cuda.json"


def test_kernel_rows_score_every_row_once_and_match_a_direct_count():
    rows = strata_report.test_rows(POINTWISE)
    got = strata_report.kernel_rows(load(SHIPPED), rows)
    assert sum(k["n"] for k in got) == len(rows) == 672
    gemm = next(k for k in got if (k["processor"], k["kernel"]) == ("cpu", "gemm-1x1"))
    mine = [r for r in rows if r["role"] == "cpu" and r["algorithm"] == "gemm-1x1"]
    q = np.asarray(load(SHIPPED).predict(mine)) / np.array([r["latency_us"] for r in mine])
    assert gemm["acc10"] == pytest.approx(np.mean(np.abs(q - 1) <= 0.1))
    assert 0.0 <= gemm["halves10"] <= 1.0


def test_the_plane_step_is_in_the_probe_not_in_the_random_pointwise_convs():
    """Session 11: the direct 1x1 conv's ~1.35x step per FMA past 32 KB padded planes, found
    around YOLO-V2's shapes, does not hold for random stride-1 1x1 convs of the body layers."""
    probe = strata_report.direct_1x1_by_plane(strata_report.test_rows(PROBE))
    assert np.median(probe[(32, 48)]) > 1.3 * np.median(probe[(16, 32)])
    # the direct conv's rows of the stratum, kept apart since session 20 re-measured the
    # stratum's stride-1 1x1 rows with the GEMM that runs them now
    pointwise = strata_report.direct_1x1_by_plane(strata_report.test_rows(POINTWISE_DIRECT))
    big = [x for (lo, _), v in pointwise.items() if lo >= 32 for x in v]
    assert len(big) >= 30 and np.median(big) < 1.1 * np.median(pointwise[(0, 16)])


def test_main_writes_the_tables_and_refuses_unnamed_sets(tmp_path, capsys):
    out = tmp_path / "strata.json"
    assert strata_report.main([str(SHIPPED), f"pw={POINTWISE}", "--planes", f"probe={PROBE}",
                               "--json", str(out)]) == 0  # fmt: skip
    assert "| pw | cpu | gemm-1x1 | k1 |" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert set(doc["kernels"]) == {"pw"} and "32-48" in doc["planes"]["probe"]
    with pytest.raises(SystemExit):
        strata_report.main([str(SHIPPED), str(POINTWISE)])
    assert "NAME=CSV" in capsys.readouterr().err
