"""The anchors' result merge (benchmarks/anchors_rows.py): a fresh measurement of a model on a
processor of a machine replaces all of that group's old rows, and nothing else."""

from __future__ import annotations

import json

from tests.helpers import load_benchmark


def _row(model, anchor, ms, machine="m1", processor="cpu", threads=2):
    return {"model": model, "processor": processor, "machine": machine, "threads": threads,
            "anchor": anchor, "codl_ms": ms, "anchor_ms": 1.0}


def test_a_new_measurement_replaces_its_group_and_keeps_the_rest(tmp_path):
    anchors = load_benchmark("anchors_rows")
    path = tmp_path / "anchors.json"
    old = [_row("bert", "onnxruntime", 9.0), _row("bert", "codl[cpu_prepack=off]", 9.0),
           _row("bert", "onnxruntime", 5.0, machine="m2"),
           _row("bert", "torch-cudagraph", 2.0, processor="gpu"),
           _row("resnet", "onnxruntime", 3.0)]
    path.write_text(json.dumps({"rows": old}))
    anchors.merge(str(path), [_row("bert", "onnxruntime", 7.0),
                              _row("bert", "codl[cpu_fast_math=off]", 7.0)])
    rows = {(r["model"], r["processor"], r["machine"], r["anchor"]): r["codl_ms"]
            for r in json.loads(path.read_text())["rows"] if r["threads"] == 2}
    assert rows == {("bert", "cpu", "m1", "onnxruntime"): 7.0,
                    ("bert", "cpu", "m1", "codl[cpu_fast_math=off]"): 7.0,
                    ("bert", "cpu", "m2", "onnxruntime"): 5.0,
                    ("bert", "gpu", "m1", "torch-cudagraph"): 2.0,
                    ("resnet", "cpu", "m1", "onnxruntime"): 3.0}
    assert [p.name for p in tmp_path.iterdir()] == ["anchors.json"]  # no temporary left


def test_rows_of_another_thread_count_are_kept_beside(tmp_path):
    """One machine timed at 16 and at 4 threads: two groups, neither replaces the other."""
    anchors = load_benchmark("anchors_rows")
    path = tmp_path / "anchors.json"
    anchors.merge(str(path), [_row("mobilenet", "onnxruntime", 2.8, threads=16)])
    anchors.merge(str(path), [_row("mobilenet", "onnxruntime", 5.3, threads=4)])
    anchors.merge(str(path), [_row("mobilenet", "onnxruntime", 2.7, threads=16)])
    rows = {r["threads"]: r["codl_ms"] for r in json.loads(path.read_text())["rows"]}
    assert rows == {16: 2.7, 4: 5.3}
