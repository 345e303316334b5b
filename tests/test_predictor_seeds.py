"""benchmarks/predictor_seeds.py: the split means, held-out CNNs and test sets kept out of
training (``--extra``)."""

from __future__ import annotations

import csv
import json

import pytest
from helpers import load_benchmark

from codl_tvm.predictor import DATA_DIR

seeds = load_benchmark("predictor_seeds")
SAMPLES = DATA_DIR / "samples-x86-cuda-h100.csv"


def test_extra_test_set_is_scored_by_the_model_of_the_whole_file(tmp_path):
    """A test set of the file's own compute rows, renamed to a model the file does not hold
    and made 10% slower: scored by the model of the whole file."""
    with open(SAMPLES, newline="") as f:
        reader = csv.DictReader(f)
        convs = [dict(r, model="random-deep", latency_us=repr(1.1 * float(r["latency_us"])))
                 for r in reader if r["op"] == "conv2d"]
        rows = [r for r in convs if r["role"] == "cpu"][:30]
        rows += [r for r in convs if r["role"] == "gpu"][:30]
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
        seeds.main([str(SAMPLES), "--extra", str(SAMPLES)])
    assert err.value.code == 2 and "--extra takes NAME=CSV" in capsys.readouterr().err


def test_ceilings_split_a_held_out_cnns_misses_into_data_form_and_noise(tmp_path):
    """``in_sample`` scores the CNN's rows with the model of the whole file (its rows in),
    next to the held-out score and the measurement's own agreement on those rows."""
    from codl_tvm.predictor import make
    from codl_tvm.predictor.accuracy import accuracy_rows
    from codl_tvm.profiler import read_samples

    samples = DATA_DIR / "samples-x86-cuda-h100.csv"
    out = tmp_path / "seeds.json"
    assert seeds.main([str(samples), "--seeds", "1", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    rows = read_samples(samples)
    whole = make("codl").fit(rows)
    for model in seeds.HELD_OUT:
        mine = [r for r in rows if r["model"] == model]
        inside = {r["processor"]: r["acc10"] for r in accuracy_rows(whole, mine)
                  if r["op"] == "all"}  # fmt: skip
        for role, c in got["ceiling"][model].items():
            assert c["held_out"] == got["held_out"][model][role]
            assert c["in_sample"] == pytest.approx(inside[role])
            assert 0.0 < c["halves10"] <= 1.0 and 0.0 < c["twins10"] <= 1.0
