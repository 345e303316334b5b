"""benchmarks/oracle_merge.py: a resumed oracle's CPU rows brought to the first instance's speed."""

from __future__ import annotations

import csv
import sys

import pytest
from helpers import load_benchmark

from codl_tvm.profiler.schema import KEY_COLUMNS

merge_script = load_benchmark("oracle_merge")


def row(role: str, op: str, h: int, latency_us: float) -> dict[str, str]:
    r = {c: "1" for c in KEY_COLUMNS}
    r.update(pair="x86-cuda", role=role, op=op, H=str(h), padding="0:0:0:0", dim="H",
             ratio="1.0", latency_us=f"{latency_us:.3f}", median_us=f"{latency_us:.3f}",
             model="m")
    return r


def test_the_second_instances_new_cpu_rows_are_divided_by_the_factor_the_shared_rows_give():
    first = [row("cpu", "conv2d", 1, 100.0), row("cpu", "conv2d", 2, 200.0),
             row("cpu", "conv2d", 3, 1000.0), row("gpu", "conv2d", 1, 50.0),
             row("gpu", "conv2d", 2, 80.0)]
    resumed = [first[0],  # carried over from the first run: the very same figures
               row("cpu", "conv2d", 2, 100.0), row("cpu", "conv2d", 3, 500.0),  # again: 0.5x
               row("gpu", "conv2d", 2, 80.0 * 1.01),
               row("cpu", "conv2d", 4, 300.0), row("gpu", "conv2d", 4, 40.0),  # never reached
               row("cpu", "to_cpu", 5, 30.0)]  # a copy: kept as measured
    rows, fac = merge_script.merge(first, resumed)
    assert fac["cpu"] == (pytest.approx(0.5), 2)
    assert fac["gpu"] == (pytest.approx(1.01), 1)
    by = {(r["role"], r["op"], r["H"]): r for r in rows}
    assert len(rows) == len(by) == 8  # every key once
    assert by[("cpu", "conv2d", "2")]["latency_us"] == "200.000"  # the first instance's
    assert float(by[("cpu", "conv2d", "4")]["latency_us"]) == pytest.approx(600.0)
    assert float(by[("cpu", "conv2d", "4")]["median_us"]) == pytest.approx(600.0)
    assert by[("gpu", "conv2d", "4")]["latency_us"] == "40.000"
    assert by[("cpu", "to_cpu", "5")]["latency_us"] == "30.000"


def test_without_rows_measured_twice_nothing_is_scaled(tmp_path, monkeypatch, capsys):
    first, resumed = tmp_path / "first.csv", tmp_path / "resumed.csv"
    for path, rows in ((first, [row("cpu", "conv2d", 1, 100.0)]),
                       (resumed, [row("cpu", "conv2d", 1, 100.0),
                                  row("cpu", "conv2d", 2, 70.0)])):
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    out = tmp_path / "merged.csv"
    monkeypatch.setattr(sys, "argv", ["oracle_merge", str(first), str(resumed), "-o", str(out)])
    assert merge_script.main() == 0
    with out.open(newline="") as f:
        merged = list(csv.DictReader(f))
    assert [r["latency_us"] for r in merged] == ["100.000", "70.000"]
    assert "2 rows" in capsys.readouterr().out
