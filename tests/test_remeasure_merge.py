"""benchmarks/remeasure_bundle.py merge: re-measured rows replace theirs in place."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from helpers import load_benchmark

from codl_tvm.predictor import DATA_DIR
from codl_tvm.profiler import read_samples
from codl_tvm.profiler.schema import row_key

remeasure = load_benchmark("remeasure_bundle")


def _write(path: Path, rows: list[dict], columns: list[str]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(rows)


def test_merge_replaces_rows_in_place_and_appends_new_ones(tmp_path):
    """Regression (session 7): merged rows went to the end of the file, which reshuffled every
    seeded split; a re-measure must leave the other rows where they were."""
    with open(DATA_DIR / "samples-x86-cuda-h100.csv", newline="") as f:
        reader = csv.DictReader(f)
        columns, rows = list(reader.fieldnames), [r for _, r in zip(range(12), reader)]
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    _write(old, rows[:10], columns)
    changed = [dict(rows[i], latency_us="123.0") for i in (3, 7)]
    _write(new, [*changed, rows[11]], columns)
    out = tmp_path / "merged.csv"
    assert remeasure.main(["merge", str(old), str(new), "-o", str(out)]) == 0
    with open(out, newline="") as f:
        merged = list(csv.DictReader(f))
    assert len(merged) == 11
    assert [r["latency_us"] for r in merged[:10]] == [
        "123.0" if i in (3, 7) else rows[i]["latency_us"] for i in range(10)]
    assert merged[10]["latency_us"] == rows[11]["latency_us"]


def test_control_jobs_draw_compute_rows_of_each_processor():
    rows = read_samples(DATA_DIR / "samples-x86-cuda-h100.csv")
    jobs = remeasure.control_jobs(rows, 30, 10, seed=4)
    assert [j.role for j in jobs].count("cpu") == 30 and [j.role for j in jobs].count("gpu") == 10
    assert {j.model for j in jobs} == {"control"} and all(j.spec is not None for j in jobs)
    keys = {row_key(r) for r in rows}
    assert all(j.key("x86-cuda") in keys for j in jobs)  # add_samples matches them by key
    assert remeasure.control_jobs(rows, 30, 10, seed=4) == jobs


@pytest.mark.parametrize("counts", [[], ["--body", "-2"]])
def test_stratum_without_convs_to_draw_stops_before_building(tmp_path, counts):
    out = tmp_path / "bundle"
    with pytest.raises(SystemExit, match="give --deep, --body or --pointwise N"):
        remeasure.main(["stratum", str(DATA_DIR / "samples-x86-cuda-h100.csv"), *counts,
                        "-o", str(out)])  # fmt: skip
    assert not out.exists()
