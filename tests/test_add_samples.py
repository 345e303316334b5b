"""benchmarks/add_samples.py: rows from another lease, net of its speed (control group)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from helpers import load_benchmark

from codl_tvm.predictor import DATA_DIR
from codl_tvm.profiler import read_samples

add_samples = load_benchmark("add_samples")


def _rows() -> tuple[list[str], list[dict]]:
    with open(DATA_DIR / "samples-x86-cuda-h100.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = [r for r in reader if r["model"] not in ("sharing", "random-k1")]
        return list(reader.fieldnames), rows


def _write(path: Path, rows: list[dict], columns: list[str]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(rows)


def _slower(row: dict, factor: float, model: str) -> dict:
    out = dict(row, model=model)
    for col in ("latency_us", "median_us", "spread_us"):
        out[col] = f"{float(row[col]) * factor:.3f}"
    out["round_us"] = ";".join(f"{float(v) * factor:.3f}" for v in row["round_us"].split(";"))
    return out


def test_new_rows_are_divided_by_the_controls_median_per_processor(tmp_path):
    columns, rows = _rows()
    cpu = [r for r in rows if r["role"] == "cpu"][:30]
    gpu = [r for r in rows if r["role"] == "gpu"][:30]
    base, new = cpu[:25] + gpu[:25], tmp_path / "new.csv"
    # the lease: CPU 2x slower, GPU as fast; controls re-measure rows of the file
    controls = [_slower(r, 2.0, "control") for r in cpu[:25]] + gpu[:25]
    controls[-25:] = [dict(r, model="control") for r in controls[-25:]]
    fresh = [_slower(r, 2.0, "random") for r in cpu[25:]] + [dict(r, model="random")
                                                            for r in gpu[25:]]  # fmt: skip
    _write(tmp_path / "base.csv", base, columns)
    _write(new, controls + fresh, columns)
    out = tmp_path / "out.csv"
    assert add_samples.main([str(tmp_path / "base.csv"), str(new), "-o", str(out)]) == 0
    merged = read_samples(out)
    assert len(merged) == len(base) + len(fresh)
    added = merged[len(base):]
    for want, got in zip(cpu[25:] + gpu[25:], added, strict=True):
        assert got["latency_us"] == pytest.approx(float(want["latency_us"]), rel=1e-3)
    only = tmp_path / "only.csv"  # a test set kept out of training: the new rows alone
    assert add_samples.main([str(tmp_path / "base.csv"), str(new), "-o", str(only),
                             "--only-new"]) == 0  # fmt: skip
    assert [r["latency_us"] for r in read_samples(only)] == [r["latency_us"] for r in added]


def test_too_few_controls_is_one_clear_error_and_writes_nothing(tmp_path):
    columns, rows = _rows()
    _write(tmp_path / "base.csv", rows[:10], columns)
    _write(tmp_path / "new.csv", [dict(rows[0], model="control"), dict(rows[11], model="x")],
           columns)  # fmt: skip
    out = tmp_path / "out.csv"
    with pytest.raises(SystemExit, match="fewer than 20 control rows"):
        add_samples.main([str(tmp_path / "base.csv"), str(tmp_path / "new.csv"), "-o", str(out)])
    assert not out.exists()
