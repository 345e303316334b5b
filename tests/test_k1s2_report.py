"""benchmarks/k1s2_report.py on a folder of runs the test writes: ratios of the same sub-op's
two kernels in one call, controls and unmatched rows left out, the rule table scoring the
kernels it says it does, and the JSON the command writes."""

from __future__ import annotations

import csv
import json
import math

import pytest
from helpers import ROOT, load_benchmark

report = load_benchmark("k1s2_report")
# only the sub-op geometry of these rows is used: the test sets every latency
TEMPLATES = ROOT / "benchmarks" / "results" / "k1s2-h100" / "k1s2old.csv"
BANDS_MB = ((0, 1), (1, 4), (4, 16), (16, math.inf))
COPY_FACTOR = 1.25  # the copy kernel: 1.25x the sampled pass on every sub-op
GEMM_FAST, GEMM_SLOW = 0.5, 2.0  # the GEMM: 0.5x the direct conv where P >= 256, else 2x


def _p(row: dict[str, str]) -> int:
    return int(row["sub_out"]) // int(row["sub_OC"])


def _weight_mb(row: dict[str, str]) -> float:
    return int(row["sub_IC"]) * int(row["sub_OC"]) * 4 / 1e6


def _with(row: dict[str, str], latency: float, model: str | None = None) -> dict[str, str]:
    out = dict(row, latency_us=repr(latency), median_us=repr(latency), round_us=repr(latency))
    if model is not None:
        out["model"] = model
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> dict:
    """12 sub-ops (3 per weight band, fewest to most output pixels P), 2 controls and 1 sub-op
    measured by one kernel only, in the four files of a k1s2 run folder."""
    with TEMPLATES.open(newline="") as f:
        reader = csv.DictReader(f)
        pool, columns = list(reader), list(reader.fieldnames)
    picked: list[dict[str, str]] = []
    for lo, hi in BANDS_MB:
        band = sorted((r for r in pool if lo <= _weight_mb(r) < hi), key=_p)
        picked += [band[0], band[len(band) // 2], band[-1]]
    assert len(picked) == 12 and {_p(r) >= 256 for r in picked} == {True, False}
    used = {id(r) for r in picked}
    rest = [r for r in pool if id(r) not in used]
    controls, lone = rest[:2], rest[2]
    base = {id(r): 10.0 + 7.0 * i for i, r in enumerate(picked)}
    sampled = [_with(r, base[id(r)]) for r in picked]
    copy = [_with(r, base[id(r)] * COPY_FACTOR) for r in picked]
    direct = [_with(r, base[id(r)] * 3) for r in picked]
    gemm = [_with(r, base[id(r)] * 3 * (GEMM_FAST if _p(r) >= 256 else GEMM_SLOW)) for r in picked]
    ctl_a = [_with(r, 5.0, "control") for r in controls]
    ctl_b = [_with(r, 50.0, "control") for r in controls]  # would pair 10x apart if counted
    root = tmp_path_factory.mktemp("k1s2")
    (root / "lease2").mkdir()
    files = {"k1s2.csv": sampled + ctl_a + [_with(lone, 1.0)], "k1s2old.csv": copy + ctl_b,
             "lease2/k1s2.csv": direct + ctl_a,
             "lease2/k1s2gemm.csv": gemm + ctl_b + [_with(lone, 9.0)]}  # fmt: skip
    for name, rows in files.items():
        with (root / name).open("w", newline="") as f:
            w = csv.DictWriter(f, columns)
            w.writeheader()
            w.writerows(rows)
    return {"path": root, "picked": picked, "fast": sum(_p(r) >= 256 for r in picked)}


def test_pairs_match_sub_ops_and_leave_the_controls_out(folder):
    root = folder["path"]
    both = report.pairs(root / "k1s2.csv", root / "k1s2old.csv")
    assert len(both) == len(folder["picked"])
    for new, old in both:
        assert new["model"] != "control"
        assert (new["H"], new["IC"], new["OC"], new["dim"], new["ratio"]) == (
            old["H"], old["IC"], old["OC"], old["dim"], old["ratio"])
        assert old["latency_us"] == pytest.approx(new["latency_us"] * COPY_FACTOR)


def test_sampled_vs_copy_is_the_ratio_of_each_sub_op_by_weight_band(folder):
    got = report.sampled_vs_copy(folder["path"])
    want = 1 / COPY_FACTOR
    for s in (got["all"], *got["by_weight"].values()):
        for key in ("median", "q10", "q90", "geomean"):
            assert s[key] == pytest.approx(want, rel=1e-9)
        assert s["faster_10pct"] == s["n"] and s["slower_10pct"] == 0
    assert got["all"]["n"] == 12
    assert [v["n"] for v in got["by_weight"].values()] == [3, 3, 3, 3]


def test_the_rule_table_scores_the_kernel_each_rule_picks(folder):
    g = report.gemm_vs_direct(folder["path"])
    n, fast = len(folder["picked"]), folder["fast"]
    geo = math.exp((fast * math.log(GEMM_FAST) + (n - fast) * math.log(GEMM_SLOW)) / n)
    assert g["all"]["n"] == n and g["all"]["geomean"] == pytest.approx(geo, rel=1e-9)
    assert (g["all"]["faster_10pct"], g["all"]["slower_10pct"]) == (fast, n - fast)
    rules = g["rules"]
    never, always, p256 = rules["never (shipped)"], rules["always"], rules["P >= 256"]
    assert never["gemm_rows"] == 0 and never["over_direct_geomean"] == pytest.approx(1.0)
    assert never["over_best_geomean"] == pytest.approx(GEMM_FAST ** (-fast / n), rel=1e-9)
    assert always["gemm_rows"] == n and always["over_direct_geomean"] == pytest.approx(geo)
    assert always["slower_than_direct_10pct"] == n - fast
    # the rule that picks the faster kernel on every sub-op
    assert p256["gemm_rows"] == fast and p256["over_best_geomean"] == pytest.approx(1.0)
    assert p256["slower_than_direct_10pct"] == 0


def test_main_writes_what_the_functions_give(folder, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert report.main([str(folder["path"]), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc == json.loads(json.dumps({"sampled_vs_copy": report.sampled_vs_copy(folder["path"]),
                                         "gemm_vs_direct": report.gemm_vs_direct(folder["path"])}))
    text = capsys.readouterr().out
    assert "| all | 12 | 0.800 |" in text and "GEMM / direct on 12 sub-ops" in text
    assert "| P >= 256 |" in text
