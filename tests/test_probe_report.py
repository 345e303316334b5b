"""benchmarks/probe_report.py: the lease's speed against the samples file, the direct 1x1
conv's time per FMA by input plane, and the tables the command prints."""

from __future__ import annotations

import math

import pytest
from helpers import ROOT, load_benchmark

from codl_tvm.predictor import DATA_DIR
from codl_tvm.profiler import read_samples
from codl_tvm.profiler.noise import _sub_key

probe_report = load_benchmark("probe_report")
PROBE = ROOT / "benchmarks" / "results" / "probe-h100" / "probe.csv"


def _first_of_each_sub_op(rows: list[dict]) -> list[dict]:
    seen: dict[tuple, dict] = {}
    for r in rows:
        seen.setdefault(_sub_key(r), r)
    return list(seen.values())


def test_lease_speed_compares_only_sub_ops_both_files_measured():
    probe = read_samples(PROBE)
    same = probe_report.lease_speed(probe, probe)
    assert all(n > 0 and speed == 1.0 for n, speed in same.values())
    # a file that measured 6 of the probe's CPU sub-ops twice each (their mean counts) at
    # 1/1.25 of the probe's time, 4 GPU ones at 1/0.8, and one more with another kernel
    mine = _first_of_each_sub_op(probe)
    cpu = [r for r in mine if r["role"] == "cpu"][:6]
    gpu = [r for r in mine if r["role"] == "gpu"][:4]
    file = [dict(r, latency_us=r["latency_us"] / 1.25 * f) for r in cpu for f in (0.9, 1.1)]
    file += [dict(r, latency_us=r["latency_us"] / 0.8) for r in gpu]
    file.append(dict(cpu[0], algorithm="another-kernel", latency_us=cpu[0]["latency_us"] * 9))
    speed = probe_report.lease_speed(cpu + gpu, file)
    assert speed["cpu"][0] == 6 and speed["cpu"][1] == pytest.approx(1.25, rel=1e-9)
    assert speed["gpu"][0] == 4 and speed["gpu"][1] == pytest.approx(0.8, rel=1e-9)
    n, none = probe_report.lease_speed(cpu, file)["gpu"]
    assert n == 0 and math.isnan(none)


def test_direct_by_plane_bins_the_direct_1x1_cpu_rows_by_input_plane():
    """ns per 1000 FMAs of the CPU direct 1x1 sub-ops with IC >= 96, by the KB of one input
    plane; other rows are left out."""
    template = next(r for r in read_samples(PROBE) if (r["role"], r["algorithm"], r["KH"])
                    == ("cpu", "direct-nchwc", 1) and r["IC"] >= 96)  # fmt: skip
    rows, want = [], {}
    # 56x56 planes: 12.25 KB, 90x90: 31.6, 96x96: 36, 112x112: 49
    for side, ns, plane in ((56, 2.0, (0, 30)), (90, 3.0, (30, 34)), (96, 5.0, (34, 40)),
                            (112, 7.0, (40, 10**6))):  # fmt: skip
        r = dict(template, H=side, W=side, sub_H=side, sub_W=side, padding="0:0:0:0",
                 sub_pad_top=0, sub_pad_bottom=0, SH=1, SW=1)  # fmt: skip
        fma = side * side * r["sub_OC"] * r["sub_IC"]
        rows.append(dict(r, latency_us=ns * fma / 1e6))
        want[plane] = [ns]
    rows += [dict(rows[0], role="gpu"), dict(rows[0], algorithm="gemm-1x1"),
             dict(rows[0], KH=3, KW=3), dict(rows[0], IC=64)]  # fmt: skip
    got = probe_report.direct_by_plane(rows)
    assert got.keys() == want.keys()
    for plane, v in want.items():
        assert got[plane] == pytest.approx(v, rel=1e-9), plane


def test_main_prints_the_three_tables(capsys):
    assert probe_report.main([str(PROBE), str(DATA_DIR / "samples-x86-cuda-h100.csv")]) == 0
    out = capsys.readouterr().out
    assert "probe / file latency" in out and "| plane |" in out and "| 1x13 sub-op |" in out
