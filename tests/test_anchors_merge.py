"""The anchors' result merge (benchmarks/anchors_rows.py): a fresh measurement of a model on a
processor of a machine replaces all of that group's old rows, and nothing else."""

from __future__ import annotations

import json

from tests.helpers import load_benchmark


def _row(model, anchor, ms, machine="m1", processor="cpu"):
    return {"model": model, "processor": processor, "machine": machine, "anchor": anchor,
            "codl_ms": ms, "anchor_ms": 1.0}


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
            for r in json.loads(path.read_text())["rows"]}
    assert rows == {("bert", "cpu", "m1", "onnxruntime"): 7.0,
                    ("bert", "cpu", "m1", "codl[cpu_fast_math=off]"): 7.0,
                    ("bert", "cpu", "m2", "onnxruntime"): 5.0,
                    ("bert", "gpu", "m1", "torch-cudagraph"): 2.0,
                    ("resnet", "cpu", "m1", "onnxruntime"): 3.0}
    assert [p.name for p in tmp_path.iterdir()] == ["anchors.json"]  # no temporary left
