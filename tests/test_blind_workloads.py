"""The second blind workload (benchmarks/blind_tables.py): GoogLeNet's and EfficientNet-B0's
dense convs from their papers' tables, none the project already measures; and the report that
scores quick-profile predictors on blind files (benchmarks/portability_report.py)."""

from __future__ import annotations

from pathlib import Path

from codl_tvm.profiler import space
from tests.helpers import load_benchmark

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "portability"


def test_the_tables_give_the_papers_convs():
    tables = load_benchmark("blind_tables")
    google = tables.googlenet()
    assert len(google) == 3 + 6 * 9  # stem, conv2, conv3 and six convs per inception module
    assert (7, 832, 384, 1, 1) in google and (28, 96, 128, 3, 1) in google
    eff = tables.efficientnet_b0()
    # stem, one projection in the first stage, an expansion and a projection per later block,
    # head: 1 + 1 + 2 * 15 + 1
    assert len(eff) == 33 and eff[0] == (224, 3, 32, 3, 2) and eff[-1] == (7, 320, 1280, 1, 1)
    assert (112, 16, 96, 1, 1) in eff and (56, 96, 24, 1, 1) in eff  # the stride-2 stage's


def test_the_blind_rows_are_new_and_load_as_a_workload(tmp_path):
    tables = load_benchmark("blind_tables")
    rows = tables.blind_rows()
    keys = [tables._key(r) for r in rows]
    assert len(set(keys)) == len(keys) and not set(keys) & tables.known_shapes()
    path = tmp_path / "b.csv"
    path.write_text(",".join(tables.COLUMNS) + "\n"
                    + "\n".join(",".join(str(r[c]) for c in tables.COLUMNS) for r in rows) + "\n")
    specs = [s for _, s in space.workload_specs(path)]
    assert len(specs) == len(rows)
    same = [s for s in specs if s.KH == 3]  # "same" padding: the output keeps the input's size
    assert same and all(s.out_h == -(-s.H // s.SH) for s in same)
    # the committed file is what the script writes
    committed = (RESULTS / "blind2-conv2d.csv").read_text().splitlines()
    assert len(committed) == len(rows) + 1


def test_the_report_scores_each_predictor_on_each_blind_file():
    report = load_benchmark("portability_report")
    r = RESULTS / "cpu-pair"
    rep = report.score({"new": r / "quick-final.csv"}, [r / "blind2.csv"], None)
    assert set(rep["blind"]) == {"blind2"}
    assert rep["blind"]["blind2"]["ceiling"]["cpu"]["twins10"] is not None
    alls = [x for x in rep["rows"] if x["algorithm"] == "all"]
    assert {x["processor"] for x in alls} == {"cpu", "gpu"}
    assert all(0.0 <= x["acc10"] <= 1.0 and x["n"] > 100 for x in alls)
    assert {"direct-nchwc", "gemm-1x1"} <= {x["algorithm"] for x in rep["rows"]}
    assert "| blind2 | new | cpu | all |" in report.table(rep)
