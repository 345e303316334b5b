"""benchmarks/padpool_pick.py: each padded pool row comes from the run of the kernel codl-tvm
builds for it (session 19's two runs of one device call)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from helpers import load_benchmark

pick = load_benchmark("padpool_pick")
R = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "padpool-h100"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_each_row_comes_from_the_kernel_that_runs_it(tmp_path) -> None:
    out = tmp_path / "picked.csv"
    assert pick.main([str(R / "padjoin-samples.csv"), str(R / "padpoolold-samples.csv"),
                      "-o", str(out)]) == 0  # fmt: skip
    copied = {pick._key(r): r for r in _rows(R / "padjoin-samples.csv")}
    inlined = {pick._key(r): r for r in _rows(R / "padpoolold-samples.csv")}
    picked = _rows(out)
    assert len(picked) == len(inlined) == 334  # the probe's convs are left out
    for row in picked:
        source = copied if pick.copies_rows(row) else inlined
        assert row == source[pick._key(row)]
    resnet = {(r["dim"], r["ratio"]): r for r in picked if r["model"] == "RESNET-18"}
    assert pick.copies_rows(resnet[("H", "0.0")])  # the whole stem pool pads rows
    assert not pick.copies_rows(resnet[("H", "0.5")])  # a row split's CPU piece: columns only
    assert not pick.copies_rows(next(r for r in picked if r["op"] == "pool_avg"))


def test_a_row_missing_from_the_copied_run_is_refused(tmp_path) -> None:
    rows = _rows(R / "padjoin-samples.csv")
    short = tmp_path / "short.csv"
    with short.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(r for r in rows if r["model"] != "RESNET-18")
    with pytest.raises(SystemExit, match="12 rows"):
        pick.main([str(short), str(R / "padpoolold-samples.csv"), "-o", str(tmp_path / "o.csv")])
