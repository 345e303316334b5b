"""benchmarks/remeasure_bundle.py merge: re-measured rows replace theirs in place."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pytest
from helpers import load_benchmark

from codl_tvm.predictor import DATA_DIR
from codl_tvm.profiler import read_samples
from codl_tvm.profiler.rounds import sample_estimate
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
def test_stratum_without_ops_to_draw_stops_before_building(tmp_path, counts):
    out = tmp_path / "bundle"
    with pytest.raises(SystemExit, match=r"give one of --deep, --body, --pointwise, --downsample, "
                       r"--pools N \(ops to draw"):
        remeasure.main(["stratum", str(DATA_DIR / "samples-x86-cuda-h100.csv"), *counts,
                        "-o", str(out)])  # fmt: skip
    assert not out.exists()


def _cpu_rows(n: int) -> tuple[list[dict], list[str]]:
    with open(DATA_DIR / "samples-x86-cuda-h100.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = [r for r in reader if r["role"] == "cpu" and r["round_us"]]
        return rows[:n], list(reader.fieldnames)


def _slower(rows: list[dict], factor: float) -> list[dict]:
    """The rows as a lease ``factor`` times slower would have measured them."""
    out = []
    for r in rows:
        visits = [float(x) * factor for x in r["round_us"].split(";")]
        out.append(dict(r, round_us=";".join(f"{v:.3f}" for v in visits),
                        latency_us=f"{float(r['latency_us']) * factor:.3f}"))
    return out


def _pool(tmp_path: Path, runs: list[list[dict]], columns: list[str], *flags: str) -> list[dict]:
    paths = []
    for i, rows in enumerate(runs):
        paths.append(tmp_path / f"run{i}.csv")
        _write(paths[-1], rows, columns)
    out = tmp_path / "pooled.csv"
    assert remeasure.main(["pool", *map(str, paths), *flags, "-o", str(out)]) == 0
    return read_samples(out)


def test_pool_joins_the_visits_of_one_lease(tmp_path):
    rows, columns = _cpu_rows(12)
    pooled = _pool(tmp_path, [rows, rows[2:]], columns)  # rows 0, 1: not in every run
    assert len(pooled) == 10
    for r, old in zip(pooled, rows[2:], strict=True):
        assert r["round_us"] == [float(x) for x in old["round_us"].split(";")] * 2
        assert r["rounds"] == 2 * int(old["rounds"])


def test_pool_rescale_puts_a_slower_lease_on_the_first_runs_scale(tmp_path, capsys):
    """Regression (session 12): pooling visits of two leases as they were mixes two CPU
    speeds; rescaled, a run 1.25x slower throughout adds visits equal to the first run's."""
    rows, columns = _cpu_rows(40)
    pooled = _pool(tmp_path, [rows, _slower(rows, 1.25)], columns, "--rescale")
    assert "lease factor * 1.250" in capsys.readouterr().out
    for r, old in zip(pooled, rows, strict=True):
        first = [float(x) for x in old["round_us"].split(";")]
        assert r["round_us"] == pytest.approx(first * 2, rel=2e-3)
        assert r["latency_us"] == pytest.approx(sample_estimate(first * 2), rel=2e-3)


def test_lease_factors_per_group_fall_back_to_the_whole_run():
    rows, _ = _cpu_rows(60)
    first = {row_key(r): r for r in rows}
    algo = rows[0]["algorithm"]
    slow = [dict(r, latency_us=str(float(r["latency_us"]) * (1.5 if r["algorithm"] == algo
                                                                else 1.1))) for r in rows]
    factors = remeasure.lease_factors(first, {row_key(r): r for r in slow}, "algorithm")
    small = {a for a in {r["algorithm"] for r in rows}
             if sum(r["algorithm"] == a for r in rows) < remeasure.MIN_FACTOR_ROWS}
    assert factors[algo] == pytest.approx(1.5) or algo in small
    for a in small:
        assert a not in factors
        assert remeasure.row_factor(factors, {"algorithm": a}, "algorithm") == factors["*"]


def test_pool_rescale_without_shared_rows_stops(tmp_path):
    rows, columns = _cpu_rows(4)
    first = {row_key(r): r for r in rows[:2]}
    with pytest.raises(SystemExit, match="share no rows"):
        remeasure.lease_factors(first, {row_key(r): r for r in rows[2:]}, None)


K1S2 = ["--where", "op=conv2d", "--where", "KH=1", "--where", "SH=2"]


def test_where_filter_matches_values_as_the_file_reads_them():
    keep = remeasure.where_filter(["KH=1", "SH=2"])
    assert keep({"KH": 1, "SH": 2}) and not keep({"KH": 1, "SH": 1}) and not keep({"KH": 1})
    with pytest.raises(SystemExit, match="expected COL=VALUE"):
        remeasure.where_filter(["KH"])


def _rescale_case(tmp_path: Path, factor: float) -> tuple[Path, Path, list[dict], list[str]]:
    """A file of 30 CPU rows and 3 changed (1x1 stride-2) ones, and a run of another lease
    ``factor`` times slower that measured all of them: the 30 as controls, the changed ones
    with new times, the third of them drawn as a control."""
    with open(DATA_DIR / "samples-x86-cuda-h100.csv", newline="") as f:
        reader = csv.DictReader(f)
        columns, rows = list(reader.fieldnames), list(reader)
    changed = remeasure.where_filter(K1S2[1::2])
    typed = read_samples(DATA_DIR / "samples-x86-cuda-h100.csv")
    k1s2 = [r for r, t in zip(rows, typed, strict=True) if t["role"] == "cpu" and changed(t)][:3]
    plain = [r for r, t in zip(rows, typed, strict=True)
             if t["role"] == "cpu" and t["algorithm"] != "copy" and not changed(t)][:30]
    old = tmp_path / "old.csv"
    _write(old, plain + k1s2, columns)
    run = [dict(r, model="control") for r in _slower(plain, factor)]
    run += [dict(r, latency_us=f"{50.0 * factor:.3f}") for r in k1s2[:2]]
    run += [dict(k1s2[2], model="control", latency_us=f"{70.0 * factor:.3f}")]
    new = tmp_path / "new.csv"
    _write(new, run, columns)
    return old, new, k1s2, columns


def test_merge_rescales_a_leases_rows_by_its_controls(tmp_path, capsys):
    """Session 17: rows re-measured on another lease join the file on its scale; a changed row
    drawn as a control is a re-measured row (its own model kept), not a control."""
    old, new, k1s2, _ = _rescale_case(tmp_path, 1.25)
    out = tmp_path / "merged.csv"
    assert remeasure.main(["merge", str(old), str(new), "--rescale-against", str(old), *K1S2,
                           "--replace-only", "-o", str(out)]) == 0
    assert "lease speed cpu 1.250 (n 30)" in capsys.readouterr().out
    merged = read_samples(out)
    assert len(merged) == 33
    assert [r["latency_us"] for r in merged[30:]] == pytest.approx([50.0, 50.0, 70.0])
    assert [r["model"] for r in merged[30:]] == [r["model"] for r in k1s2]
    plain = read_samples(old)[:30]
    assert [r["latency_us"] for r in merged[:30]] == [r["latency_us"] for r in plain]


def test_merge_rescale_needs_enough_controls(tmp_path):
    old, new, _, columns = _rescale_case(tmp_path, 1.1)
    with open(new, newline="") as f:
        few = list(csv.DictReader(f))[-13:]  # 10 controls and the 3 changed rows
    _write(new, few, columns)
    out = tmp_path / "merged.csv"
    with pytest.raises(SystemExit, match="fewer than 20 control rows"):
        remeasure.main(["merge", str(old), str(new), "--rescale-against", str(old), *K1S2,
                        "-o", str(out)])
    assert not out.exists()


def test_bundle_takes_rows_of_every_file_and_controls_whose_kernels_did_not_change():
    """Session 17: 10 of 160 controls drawn from the whole file were 1x1 stride-2 rows, whose
    kernel had changed; their ratios are no lease speed."""
    from helpers import ROOT

    deep = ROOT / "benchmarks" / "results" / "deep-h100" / "deep-samples.csv"
    args = argparse.Namespace(samples=[str(DATA_DIR / "samples-x86-cuda-h100.csv"), str(deep)],
                              role="cpu", algorithms=None, where=K1S2[1::2],
                              controls="160,0", seed=17)  # fmt: skip
    rows, jobs = remeasure.bundle_jobs(args)
    assert {r["model"] for r in rows} == {"random-downsample", "random-deep"}
    controls = jobs[len(rows):]
    assert len(controls) == 160 and {j.model for j in controls} == {"control"}
    assert not any(j.spec.KH == 1 and j.spec.SH == 2 for j in controls)


@pytest.mark.parametrize("text", ["160", "160,a", "1,2,3", "-1,0"])
def test_a_malformed_controls_count_is_one_clear_error(text):
    with pytest.raises(SystemExit, match="expected CPU,GPU row counts"):
        remeasure.control_counts(text)
    assert remeasure.control_counts("160,0") == (160, 0)


def test_merge_takes_the_controls_of_another_run_of_the_call(tmp_path, capsys):
    """Session 20: two kernels of the same sub-ops cannot share a bundle (one key each), so the
    GEMM's run has no controls; the direct conv's run of the same call has them."""
    old, new, k1s2, columns = _rescale_case(tmp_path, 1.25)
    with open(new, newline="") as f:
        run = list(csv.DictReader(f))
    gemm, direct = tmp_path / "gemm.csv", tmp_path / "direct.csv"
    _write(gemm, run[30:], columns)
    _write(direct, run[:30], columns)
    out = tmp_path / "merged.csv"
    assert remeasure.main(["merge", str(old), str(gemm), "--controls-from", str(direct),
                           "--rescale-against", str(old), *K1S2, "-o", str(out)]) == 0
    assert "lease speed cpu 1.250 (n 30)" in capsys.readouterr().out
    assert [r["latency_us"] for r in read_samples(out)[30:]] == pytest.approx([50.0, 50.0, 70.0])


def test_merge_onto_a_raw_runs_lease(tmp_path, capsys):
    """A raw run with control rows of its own (a held-out CNN's, ``heldout_cnn_report``) takes
    re-measured rows on its lease: 1.6x slower than the file, so rows measured 1.25x slower
    come in at 1.6 / 1.25 their times."""
    old, new, k1s2, columns = _rescale_case(tmp_path, 1.25)
    with open(old, newline="") as f:
        ref = list(csv.DictReader(f))
    raw = [dict(r, model="control") for r in _slower(ref[:30], 1.6)] + ref[30:]
    target = tmp_path / "raw.csv"
    _write(target, raw, columns)
    out = tmp_path / "merged.csv"
    assert remeasure.main(["merge", str(target), str(new), "--rescale-against", str(old),
                           "--onto-lease", *K1S2, "-o", str(out)]) == 0
    assert "onto" in capsys.readouterr().out
    merged = read_samples(out)
    assert [r["latency_us"] for r in merged[30:]] == pytest.approx([80.0, 80.0, 112.0])
    with pytest.raises(SystemExit, match="--onto-lease needs --rescale-against"):
        remeasure.main(["merge", str(target), str(new), "--onto-lease", "-o", str(out)])


def test_bundle_measures_a_row_that_several_files_share_once(tmp_path):
    """Session 20: a CNN run's control rows are rows of the samples file; picked from both,
    the same sub-op made two jobs of one key, which ``join`` refuses."""
    src = DATA_DIR / "samples-x86-cuda-h100.csv"
    args = argparse.Namespace(samples=[str(src), str(src)], role="cpu", algorithms=None,
                              where=K1S2[1::2], controls="0,0", seed=0)  # fmt: skip
    rows, jobs = remeasure.bundle_jobs(args)
    assert len({row_key(r) for r in rows}) == len(rows) == len(jobs)
    assert len(rows) == sum(1 for r in read_samples(src) if r["role"] == "cpu"
                            and remeasure.where_filter(K1S2[1::2])(r))


def test_merge_controls_where_takes_rows_of_the_same_kernel_whatever_their_model(tmp_path,
                                                                               capsys):
    """Session 20: the new GEMM rows' lease speed came from the file's GEMM rows measured in
    the same run (the direct conv's rows of the same sub-ops ran 8% differently on another
    lease). Rows the file measured with the same kernel are controls and replace nothing;
    the rows whose kernel changed take their places."""
    old, new, k1s2, columns = _rescale_case(tmp_path, 1.25)
    with open(new, newline="") as f:
        run = list(csv.DictReader(f))
    own = [dict(r, model="random") for r in run[:30]]  # no model=control among them
    changed = [dict(r, algorithm="gemm-1x1", model="random-downsample") for r in run[30:]]
    _write(new, own + changed, columns)
    out = tmp_path / "merged.csv"
    assert remeasure.main(["merge", str(old), str(new), "--controls-where", "role=cpu",
                           "--rescale-against", str(old), *K1S2, "-o", str(out)]) == 0
    assert "lease speed cpu 1.250 (n 30)" in capsys.readouterr().out
    merged = read_samples(out)
    assert len(merged) == 33
    assert [r["algorithm"] for r in merged[30:]] == ["gemm-1x1"] * 3
    plain = read_samples(old)[:30]
    assert [r["latency_us"] for r in merged[:30]] == [r["latency_us"] for r in plain]


def test_pool_and_lease_factors_leave_out_rows_whose_kernel_changed(tmp_path):
    """Session 20: a sample key does not name the kernel; after a dispatch change the file's
    row and another lease's row of one key measured two kernels, and pooling their visits
    (or taking their ratio for the lease's speed) mixed them."""
    rows, columns = _cpu_rows(30)
    run = _slower(rows, 1.25)
    run[0] = dict(run[0], algorithm="gemm-1x1", latency_us="1.000")
    first = {row_key(r): r for r in rows}
    factors = remeasure.lease_factors(first, {row_key(r): r for r in run}, None)
    assert factors["*"] == pytest.approx(1.25, rel=1e-3)
    pooled = _pool(tmp_path, [rows, run], columns, "--rescale")
    assert len(pooled) == 29 and row_key(rows[0]) not in {row_key(r) for r in pooled}
