"""benchmarks/predictor_seeds.py: the split means, held-out CNNs and test sets kept out of
training (``--extra``)."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

from codl_tvm.predictor import DATA_DIR

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("predictor_seeds",
                                               ROOT / "benchmarks" / "predictor_seeds.py")
seeds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(seeds)
DEEP = ROOT / "benchmarks" / "results" / "deep-h100" / "deep-samples.csv"


def test_extra_test_set_is_scored_by_the_model_of_the_whole_file(tmp_path):
    with open(DEEP, newline="") as f:
        reader = csv.DictReader(f)
        rows = [r for _, r in zip(range(60), reader)]
        columns = list(reader.fieldnames)
    extra = tmp_path / "deep.csv"
    with open(extra, "w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "seeds.json"
    assert seeds.main([str(DATA_DIR / "samples-x86-cuda-h100.csv"), "--seeds", "1",
                       "--extra", f"deep={extra}", "--json", str(out)]) == 0  # fmt: skip
    got = json.loads(out.read_text())["extra"]["deep"]
    assert set(got) == {"cpu", "gpu"} and all(0.0 <= v <= 1.0 for v in got.values())


def test_extra_without_a_name_is_one_clear_error(capsys):
    with pytest.raises(SystemExit) as err:
        seeds.main([str(DATA_DIR / "samples-x86-cuda-h100.csv"), "--extra", str(DEEP)])
    assert err.value.code == 2 and "--extra takes NAME=CSV" in capsys.readouterr().err
