"""Accuracy per kernel (processor, op, algorithm): ``report``'s ``kernels`` rows, ``codl-tvm
report``'s table and JSON, and ``codl-tvm train``'s in-sample table with a warning for each
kernel measured on too few samples (issue #31)."""

from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict

import numpy as np
import pytest

from codl_tvm.cli import main
from codl_tvm.predictor import DATA_DIR, load, report
from codl_tvm.predictor.accuracy import (
    MIN_KERNEL_SAMPLES,
    accuracy_rows,
    few_sample_kernels,
    format_kernel_table,
    kernel_rows,
)
from codl_tvm.profiler import read_samples

SAMPLES = DATA_DIR / "samples-x86-cuda-h100.csv"
PREDICTOR = DATA_DIR / "predictor-x86-cuda.json"
SPARSE = ("gpu", "conv2d", "gpu-winograd-2x2-3x3")  # a kernel the subset keeps 4 rows of


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return read_samples(SAMPLES)


@pytest.fixture(scope="module")
def kernels(rows) -> list[dict]:
    return kernel_rows(load(PREDICTOR), rows)


def test_one_row_per_kernel_of_the_samples(rows, kernels):
    keys = [(k["processor"], k["op"], k["algorithm"]) for k in kernels]
    present = Counter((r["role"], r["op"], r["algorithm"]) for r in rows)
    assert len(keys) == len(set(keys)) and set(keys) == set(present)
    assert {k["op"] for k in kernels} >= {"to_cpu", "to_gpu", "slice", "concat"}  # sharing too
    assert all(k["n"] == present[key] for k, key in zip(kernels, keys, strict=True))
    assert sum(k["n"] for k in kernels) == len(rows)
    for k in kernels:
        assert 0.0 <= k["acc10"] <= 1.0 and k["mape"] >= 0.0, k


def test_kernel_rows_add_up_to_the_op_rows(rows, kernels):
    """Per (processor, op), the kernels' n-weighted acc10 and MAPE are the op row's."""
    ops = {(r["processor"], r["op"]): r for r in accuracy_rows(load(PREDICTOR), rows)}
    merged: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for k in kernels:
        merged[(k["processor"], k["op"])].append(k)
    for key, ks in merged.items():
        n = sum(k["n"] for k in ks)
        assert n == ops[key]["n"]
        assert sum(k["acc10"] * k["n"] for k in ks) / n == pytest.approx(ops[key]["acc10"])
        assert sum(k["mape"] * k["n"] for k in ks) / n == pytest.approx(ops[key]["mape"])


def test_report_keeps_its_fields_and_gains_kernels(rows, kernels):
    rep = report(PREDICTOR, rows)
    assert {"kind", "pair", "size_bytes", "predict_us_per_op", "rows", "kernels"} <= set(rep)
    assert [(k["processor"], k["op"], k["algorithm"], k["n"]) for k in rep["kernels"]] == [
        (k["processor"], k["op"], k["algorithm"], k["n"]) for k in kernels
    ]
    assert all(set(k) == {"processor", "op", "algorithm", "n", "acc10", "mape", "median_ratio"}
               for k in rep["kernels"])  # fmt: skip


def test_few_sample_kernels_name_the_kernel_and_count():
    ks = [
        {"processor": "gpu", "op": "conv2d", "algorithm": "gpu-winograd-2x2-3x3", "n": 4},
        {"processor": "cpu", "op": "conv2d", "algorithm": "gemm-1x1", "n": MIN_KERNEL_SAMPLES},
        {"processor": "cpu", "op": "sync", "algorithm": "copy", "n": 1},
    ]
    msgs = few_sample_kernels(ks)
    assert len(msgs) == 1  # the sync probe is one row of no size, not a model of sizes
    assert "gpu conv2d/gpu-winograd-2x2-3x3" in msgs[0] and "4 samples" in msgs[0]
    assert f"< {MIN_KERNEL_SAMPLES}" in msgs[0]
    assert all("\n" not in m for m in msgs)
    assert few_sample_kernels(ks, min_samples=1) == []


def _subset(tmp_path, keep_sparse: int) -> str:
    """The shipped samples with only ``keep_sparse`` rows of the SPARSE kernel."""
    with SAMPLES.open(newline="") as f:
        reader = csv.DictReader(f)
        fields, raw = reader.fieldnames, list(reader)
    seen = 0
    out = []
    for r in raw:
        if (r["role"], r["op"], r["algorithm"]) == SPARSE:
            seen += 1
            if seen > keep_sparse:
                continue
        out.append(r)
    path = tmp_path / "few.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(out)
    return str(path)


def test_train_prints_the_kernel_table_and_warns_on_a_sparse_kernel(tmp_path, capsys):
    samples = _subset(tmp_path, keep_sparse=4)
    out = tmp_path / "p.json"
    assert main(["train", samples, "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["pair"] == "x86-cuda"  # stdout stays one JSON line
    err = captured.err.splitlines()
    assert any("algorithm" in line and "MAPE" in line for line in err)
    table = [line.split() for line in err if not line.startswith("warning:")]
    assert ["gpu", "conv2d", "gpu-winograd-2x2-3x3", "4"] in [t[:4] for t in table]
    warned = [line for line in err if line.startswith("warning:")]
    sparse = [line for line in warned if "gpu conv2d/gpu-winograd-2x2-3x3" in line]
    assert len(sparse) == 1 and "4 samples" in sparse[0], warned
    assert not any("gpu conv2d/gpu-conv-tiled " in line for line in warned)  # 585 rows


def test_report_cli_json_and_table(capsys):
    assert main(["report", str(PREDICTOR), str(SAMPLES), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"rows", "kernels"} <= set(doc)
    assert any(k["algorithm"] == "gpu-winograd-2x2-3x3" for k in doc["kernels"])
    assert main(["report", str(PREDICTOR), str(SAMPLES)]) == 0
    text = capsys.readouterr().out
    assert "MAPE" in text and "gpu-conv-tiled-split-k" in text
    assert format_kernel_table(doc["kernels"]) in text


def test_a_kernel_priced_one_factor_off_shows_it_in_its_median_ratio():
    from codl_tvm.predictor.accuracy import _stats

    pred = np.array([100.0, 200.0, 400.0, 50.0])
    stats = _stats(pred, pred * 0.5)  # every row ran in half its predicted time
    assert stats["acc10"] == 0.0 and stats["mape"] == pytest.approx(1.0)
    assert stats["median_ratio"] == pytest.approx(0.5)
    scatter = _stats(pred, pred * np.array([0.8, 1.25, 0.9, 1.1]))  # scatter, no bias
    assert scatter["median_ratio"] == pytest.approx(1.0)
