"""The rounds measurement protocol, its CSV columns, bundle interleaving and the noise report."""

from __future__ import annotations

import csv
import warnings

import numpy as np
import pytest

from codl_tvm.device import DevicePair
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.profiler import read_samples, space
from codl_tvm.profiler.bundle import build_bundle, interleave_batches
from codl_tvm.profiler.measure import plan_batches
from codl_tvm.profiler.noise import noise_rows
from codl_tvm.profiler.rounds import (
    Item,
    Protocol,
    RoundBook,
    run_rounds,
    sample_estimate,
    summarize,
)
from codl_tvm.profiler.schema import COLUMNS, OPTIONAL_COLUMNS, SampleWriter, row_key
from tests.test_profiler_measure import SPECS, tiny_jobs


def _rows(n=6):
    pair = DevicePair.preset("cpu-pair")
    jobs = space.compute_jobs(SPECS[:2], (0.3, 1.0))[:n]
    rows = []
    for j in jobs:
        row = j.row(pair.name, pair.cpu_spec)
        row.update(algorithm="direct-nchwc", block=0, unit=16, cores=2)
        rows.append(row)
    return rows


def test_summarize_is_lower_half_mean_of_round_lower_quartiles():
    visits = [[10.0, 11.0, 12.0, 30.0], [20.0, 20.0, 21.0, 22.0], [9.0, 9.5, 10.0, 10.5]]
    out = summarize(visits)
    est = [np.percentile(v, 25) for v in visits]
    assert out["latency_us"] == pytest.approx(min(est), abs=1e-3)  # 3 visits: the lowest
    assert out["rounds"] == 3 and out["repeat"] == 12
    assert out["median_us"] == pytest.approx(np.median(np.concatenate(visits)), abs=1e-3)
    assert [float(x) for x in out["round_us"].split(";")] == pytest.approx(est, abs=1e-3)


def test_sample_estimate_keeps_the_lower_half():
    assert sample_estimate([5.0]) == 5.0
    assert sample_estimate([8.0, 4.0]) == 4.0
    assert sample_estimate([10.0, 13.0, 10.4, 20.0, 10.2]) == pytest.approx(10.1)
    # a slow state in half of the visits does not move the estimate
    assert sample_estimate([10.0, 10.2, 14.0, 14.5]) == pytest.approx(10.1)


def _visitor(log, name, costs):
    def visit():
        log.append(name)
        return list(costs), 1e-4

    return visit


def test_rounds_interleave_resume_and_old_files_load(tmp_path):
    rows = _rows()
    out = tmp_path / "s.csv"
    # an old-format file (no optional columns) with one final row
    old = {**rows[0], "latency_us": 5.0, "spread_us": 0.1, "repeat": 3}
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS)
        w.writeheader()
        w.writerow({c: old[c] for c in COLUMNS})
    log: list[str] = []
    items = [Item(r, _visitor(log, str(i), [10.0 + i] * 3), "g") for i, r in enumerate(rows)]
    book = RoundBook(out, COLUMNS, row_key)
    proto = Protocol(rounds=3, seed=1)
    counts = run_rounds(items, book, proto, deadline_s=1e9)
    assert counts["resumed"] == 1 and counts["measured"] == len(rows) - 1
    assert len(log) == 3 * (len(rows) - 1)
    per_round = [log[i : i + len(rows) - 1] for i in range(0, len(log), len(rows) - 1)]
    assert all(sorted(p) == sorted(per_round[0]) for p in per_round)
    assert per_round[0] != per_round[1] or per_round[1] != per_round[2]  # reshuffled
    back = read_samples(out)
    assert [r["rounds"] for r in back] == [1] + [3] * (len(rows) - 1)
    assert back[0]["median_us"] == 5.0 and back[0]["round_us"] == [5.0]
    assert back[1]["round_us"] == [11.0, 11.0, 11.0]
    assert not (tmp_path / "s.csv.rounds.jsonl").exists()


def test_interrupted_rounds_resume_from_the_journal(tmp_path):
    rows = _rows(3)
    out = tmp_path / "s.csv"
    book = RoundBook(out, COLUMNS, row_key)
    book.add(rows[0], [7.0, 7.0])
    book.flush()  # what a killed run leaves: the CSV so far and the journal
    assert read_samples(out)[0]["rounds"] == 1
    log: list[str] = []
    items = [Item(r, _visitor(log, str(i), [8.0]), "g") for i, r in enumerate(rows)]
    run_rounds(items, RoundBook(out, COLUMNS, row_key), Protocol(rounds=2), deadline_s=1e9)
    assert log.count("0") == 1 and log.count("1") == 2
    assert read_samples(out)[0]["round_us"] == [7.0, 8.0]


def test_deadline_and_slow_groups(tmp_path):
    rows = _rows(4)
    log: list[str] = []

    def slow():
        log.append("slow")
        return [5e6], 5.0

    items = [Item(rows[0], _visitor(log, "a", [1.0]), "g", 1),
             Item(rows[1], slow, "g", 2),
             Item(rows[2], _visitor(log, "c", [1.0]), "g", 3),
             Item(rows[3], _visitor(log, "d", [1.0]), "h", 9)]  # fmt: skip
    book = RoundBook(tmp_path / "s.csv", COLUMNS, row_key)
    counts = run_rounds(items, book, Protocol(rounds=2), deadline_s=1e9, max_call_s=1.0)
    assert log.count("slow") == 1 and log.count("c") == 0 and log.count("d") == 2
    assert counts["skipped"] == 1
    book = RoundBook(tmp_path / "t.csv", COLUMNS, row_key)
    counts = run_rounds(items, book, Protocol(rounds=2), deadline_s=-1.0)
    assert counts["measured"] == 0 and counts["skipped"] == 4


def test_sample_writer_appends_to_old_files(tmp_path):
    rows = _rows(2)
    out = tmp_path / "s.csv"
    full = [dict(r, latency_us=3.0, spread_us=0.0, repeat=1) for r in rows]
    with out.open("w", newline="") as fh:  # a file written before the optional columns
        w = csv.DictWriter(fh, COLUMNS)
        w.writeheader()
        w.writerow({c: full[0][c] for c in COLUMNS})
    SampleWriter(out).write(full[1:])
    back = read_samples(out)
    assert len(back) == 2 and back[1]["rounds"] == 1 and back[1]["round_us"] == [3.0]
    new = tmp_path / "n.csv"
    SampleWriter(new).write([dict(full[0], rounds=2, round_us=[3.0, 3.1], median_us=3.05)])
    assert read_samples(new)[0]["round_us"] == [3.0, 3.1]
    assert set(OPTIONAL_COLUMNS) <= set(next(csv.reader(new.open())))


@pytest.mark.parametrize("bad", ["1;x", "nan;2", "-1;3"])
def test_bad_round_column(tmp_path, bad):
    out = tmp_path / "s.csv"
    SampleWriter(out).write([dict(_rows(1)[0], latency_us=3.0, spread_us=0.0, repeat=1,
                                  rounds=2, round_us=bad, median_us=3.0)])  # fmt: skip
    with pytest.raises(ValueError, match="round_us"):
        read_samples(out)


def test_bundle_batches_alternate_roles():
    jobs = space.compute_jobs(SPECS * 3, (0.1, 0.3, 0.5, 0.7, 1.0)) + space.sharing_jobs(4, 1 << 16)
    batches = interleave_batches(plan_batches(jobs, 8))
    roles = [b[0] or "copy" for b in batches]
    assert roles[:3] == ["gpu", "cpu", "copy"]
    # any prefix (what a size cap keeps) holds every role about evenly
    for n in range(3, len(roles)):
        counts = [roles[:n].count(r) for r in ("gpu", "cpu")]
        assert abs(counts[0] - counts[1]) <= 1


def test_bundle_cap_says_what_it_left_out(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        man = build_bundle(DevicePair.preset("cpu-pair"), tiny_jobs(), tmp_path / "b",
                           batch_size=4, max_bytes=1, progress=False)  # fmt: skip
    assert len(man["libs"]) == 1 and man["libs"][0]["role"] == "gpu"
    assert man["left_out_by"]["cpu"] > 0 and man["left_out_by"]["copy"] > 0
    assert man["left_out"] == sum(man["left_out_by"].values())
    assert any("left out" in str(w.message) for w in caught)


def test_noise_report_from_rounds_and_from_duplicates():
    rows = _rows(4)
    for r, rounds in zip(rows, ([10.0, 10.5], [10.0, 13.0], [5.0, 5.1, 5.2], [7.0])):
        r.update(round_us=rounds, latency_us=float(np.median(rounds)), role="cpu")
    out = {(n["processor"], n["op"]): n for n in noise_rows(rows)}
    role = "cpu"
    assert out[(role, "all")]["source"] == "rounds" and out[(role, "all")]["samples"] == 3
    assert out[(role, "all")]["agree10"] == pytest.approx((2 + 0 + 6) / (2 + 2 + 6))
    assert out[(role, "all")]["halves10"] is None  # no row of >= 4 rounds
    dup = [dict(rows[0], round_us=[9.0]), dict(rows[0], round_us=[12.0], latency_us=12.0)]
    assert noise_rows(dup)[0]["source"] == "duplicates"


def test_noise_halves_compare_the_sample_estimates_of_odd_and_even_visits():
    rows = _rows(2)
    # odd visits 10, 10.2; even 14, 10.3: single visits disagree, the estimates agree
    rows[0].update(round_us=[10.0, 14.0, 10.2, 10.3], role="cpu", latency_us=10.1)
    rows[1].update(round_us=[10.0, 20.0, 10.0, 20.0], role="cpu", latency_us=10.0)
    out = {(n["processor"], n["op"]): n for n in noise_rows(rows)}
    assert out[("cpu", "all")]["halves10"] == pytest.approx(0.5)
    assert out[("cpu", "all")]["agree10"] < 0.5
    assert out[("cpu", "all")]["twins10"] is None  # two different sub-ops


@pytest.mark.parametrize(("other_us", "twins10"), [(10.5, 1.0), (13.0, 0.0)])
def test_noise_twins_compare_rows_that_measured_one_sub_op(other_us, twins10):
    """The same full op reached as the H and the OC split at ratio 0 is one sub-op in two rows:
    their latencies agree or not whatever each row's own visits say."""
    spec = OpSpec("conv2d", 12, 12, 8, 32, 3, 3, 1, 1, (1, 1, 1, 1))
    pair = DevicePair.preset("cpu-pair")
    rows = [space.Job("cpu", "conv2d", spec, dim, 0.0).row(pair.name, pair.cpu_spec)
            for dim in ("H", "OC")]  # fmt: skip
    for r, us in zip(rows, (10.0, other_us), strict=True):
        r.update(algorithm="direct-nchwc", latency_us=us, round_us=[us] * 4)
    out = {(n["processor"], n["op"]): n for n in noise_rows(rows)}
    assert out[("cpu", "conv2d")]["halves10"] == 1.0
    assert out[("cpu", "conv2d")]["twins10"] == twins10


def test_resummarize_rewrites_latency_from_the_visits(tmp_path):
    from codl_tvm.cli import main

    rows = _rows(2)
    rows[0].update(latency_us=12.0, round_us="10.0;12.0;14.0", rounds=3)
    rows[1].update(latency_us=7.0, round_us="7.0", rounds=1)
    for r in rows:
        r.update(spread_us=0.5, repeat=3, median_us=r["latency_us"])
    src = tmp_path / "old.csv"
    with src.open("w", newline="") as fh:
        w = csv.DictWriter(fh, list(rows[0]), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    assert main(["profile-resummarize", str(src), "-o", str(tmp_path / "new.csv")]) == 0
    back = read_samples(tmp_path / "new.csv")
    assert back[0]["latency_us"] == 10.0 and back[0]["round_us"] == [10.0, 12.0, 14.0]
    assert back[1]["latency_us"] == 7.0


def test_resummarize_refuses_a_file_without_visits(tmp_path):
    from codl_tvm.profiler.rounds import resummarize

    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="round_us"):
        resummarize(bad, tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()


def test_noise_command_reports_one_models_rows(capsys):
    """``noise --model``: the ceiling of those rows only, the same as noise_rows on them; a
    model the file does not hold is one clear error."""
    import json

    from codl_tvm.cli import main
    from codl_tvm.predictor import DATA_DIR

    samples = DATA_DIR / "samples-x86-cuda-h100.csv"
    assert main(["profile-noise", str(samples), "--model", "YOLO-V2", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    mine = [r for r in read_samples(samples) if r["model"] == "YOLO-V2"]
    assert got == json.loads(json.dumps(noise_rows(mine)))
    assert got != json.loads(json.dumps(noise_rows(read_samples(samples))))
    assert main(["profile-noise", str(samples), "--model", "NOPE"]) == 1
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "noise: error:" in err and "no rows of model NOPE" in err


def test_cpu_samples_of_ops_with_weights_are_timed_with_the_weights_evicted():
    import tvm

    from codl_tvm.profiler.rounds import cold_weights

    proto = Protocol()
    assert cold_weights(proto, "conv2d", tvm.cpu()) and cold_weights(proto, "dense", tvm.cpu())
    assert cold_weights(proto, "depthwise", tvm.cpu())
    # a remote CPU (RPC session mask) is a CPU too
    assert cold_weights(proto, "conv2d", tvm.runtime.Device(1 + 128, 0))
    for op in ("slice", "concat", "to_cpu", "pool_max", "elementwise"):
        assert not cold_weights(proto, op, tvm.cpu())
    assert not cold_weights(proto, "conv2d", tvm.cuda())
    assert not cold_weights(Protocol(cpu_cold_weights=False), "conv2d", tvm.cpu())


def test_a_cold_visit_times_single_calls_of_the_real_function():
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    from codl_tvm.profiler.rounds import COLD_MAX_REPEATS, time_function

    @tvm.script.ir_module
    class Dense:
        @R.function
        def f(x: R.Tensor((1, 256), "float32"), w: R.Tensor((256, 1024), "float32")):
            return R.matmul(x, w)

    vm = relax.VirtualMachine(tvm.compile(Dense, target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal(s).astype("float32") for s in ((1, 256), (256, 1024)))
    args = [tvm.runtime.tensor(x), tvm.runtime.tensor(w)]
    proto = Protocol(repeats=3, min_repeat_ms=1.0, warmup_ms=1.0)
    warm, _ = time_function(vm, "f", args, tvm.cpu(), proto)
    cold, _ = time_function(vm, "f", args, tvm.cpu(), proto, cold=True)
    assert len(warm) == 3  # repeats of several calls each
    assert proto.repeats <= len(cold) <= COLD_MAX_REPEATS  # one call per repeat
    assert all(c > 0 for c in warm + cold)
    # the function still computes x @ w
    np.testing.assert_allclose(vm["f"](*args).numpy(), x @ w, rtol=1e-5, atol=1e-4)
