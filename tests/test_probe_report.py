"""benchmarks/probe_report.py on session 10's committed probe: the figures PREDICTOR.md quotes."""

from __future__ import annotations

import numpy as np
from helpers import ROOT, load_benchmark

from codl_tvm.predictor import DATA_DIR
from codl_tvm.profiler import read_samples

probe_report = load_benchmark("probe_report")
PROBE = ROOT / "benchmarks" / "results" / "probe-h100" / "probe.csv"


def test_lease_speed_compares_only_sub_ops_both_files_measured():
    probe = read_samples(PROBE)
    same = probe_report.lease_speed(probe, probe)
    assert all(n > 0 and speed == 1.0 for n, speed in same.values())
    speed = probe_report.lease_speed(probe, read_samples(DATA_DIR / "samples-x86-cuda-h100.csv"))
    # 25 sub-ops and 1.064x against the file of session 10 (PREDICTOR.md); since session 20
    # the file's stride-1 1x1 rows measure the GEMM, and only the probe's other 10 compare
    assert speed["cpu"][0] == 10 and round(speed["cpu"][1], 3) == 1.030


def test_direct_1x1_time_per_fma_steps_past_32_kb_planes():
    bins = probe_report.direct_by_plane(read_samples(PROBE))
    assert sum(len(v) for v in bins.values()) == 105
    assert np.median(bins[(0, 30)]) < 0.8 * np.median(bins[(34, 40)])


def test_main_prints_the_three_tables(capsys):
    assert probe_report.main([str(PROBE), str(DATA_DIR / "samples-x86-cuda-h100.csv")]) == 0
    out = capsys.readouterr().out
    assert "probe / file latency" in out and "| plane |" in out and "| 1x13 sub-op |" in out
