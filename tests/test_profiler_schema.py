"""Samples CSV: schema validation, resume bookkeeping, workload parsing, job geometry."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.profiler import space
from codl_tvm.profiler.schema import COLUMNS, SampleError, SampleWriter, read_samples, row_key

WORKLOADS = Path("/work/shared/workloads")


def _row(pair: str = "cpu-pair", **kw) -> dict:
    job = space.Job("gpu", "conv2d", OpSpec("conv2d", 8, 8, 4, 8, 3, 3, pad=(1, 1, 1, 1)), "H", 0.5)
    row = job.row(pair, {"kind": "llvm"})
    row.update(algorithm="llvm-naive", block=0, unit=1, cores=1, latency_us=12.5, spread_us=0.1,
               repeat=5)  # fmt: skip
    row.update(kw)
    return row


def _write(path: Path, rows: list[dict], columns=COLUMNS) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def test_round_trip_and_resume(tmp_path):
    out = tmp_path / "s.csv"
    writer = SampleWriter(out)
    writer.write([_row(), _row(ratio=0.7)])
    rows = read_samples(out, pair="cpu-pair")
    assert len(rows) == 2 and rows[0]["latency_us"] == 12.5 and rows[0]["sub_H"] == 5
    again = SampleWriter(out)
    assert row_key(_row(ratio=0.7)) in again.done and row_key(_row(ratio=0.2)) not in again.done


def test_missing_column(tmp_path):
    path = _write(tmp_path / "s.csv", [_row()], [c for c in COLUMNS if c != "latency_us"])
    with pytest.raises(SampleError, match=r"missing columns \['latency_us'\]"):
        read_samples(path)


@pytest.mark.parametrize("bad", ["nan", "", "fast"])
def test_bad_latency(tmp_path, bad):
    path = _write(tmp_path / "s.csv", [_row(), _row(ratio=0.2, latency_us=bad)])
    with pytest.raises(SampleError, match=r"s.csv:3: column 'latency_us'"):
        read_samples(path)


def test_other_pair_rejected(tmp_path):
    path = _write(tmp_path / "s.csv", [_row(), _row(pair="x86-cuda", ratio=0.2)])
    with pytest.raises(SampleError, match="device pair 'x86-cuda'"):
        read_samples(path)
    with pytest.raises(SampleError, match="expected 'android-opencl'"):
        read_samples(_write(tmp_path / "t.csv", [_row()]), pair="android-opencl")


@pytest.mark.skipif(not WORKLOADS.exists(), reason="shared workloads not mounted")
def test_workload_files_parse():
    conv = space.workload_specs(WORKLOADS / "conv2d.csv")
    assert conv and all(s.kind in ("conv2d", "depthwise") for _, s in conv)
    # SAME padding keeps ceil(in / stride) rows
    for _, s in conv:
        assert s.out_h == -(-s.H // s.SH)
    pools = space.workload_specs(WORKLOADS / "pool2d.csv")
    assert {s.kind for _, s in pools} <= {"pool_max", "pool_avg"}
    dense = space.workload_specs(WORKLOADS / "dense.csv")
    assert all(s.kind == "dense" and s.H == 1 for _, s in dense)


def test_workload_file_wrong_format(tmp_path):
    p = tmp_path / "w.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a workload file"):
        space.workload_specs(p)


def test_jobs_cover_both_roles_dims_and_grid():
    spec = OpSpec("conv2d", 10, 10, 4, 8, 3, 3, pad=(1, 1, 1, 1))
    jobs = space.compute_jobs([spec], space.FULL_GRID)
    shares = {(j.role, j.dim): set() for j in jobs}
    for j in jobs:
        shares[(j.role, j.dim)].add(round(j.share, 1))
    assert set(shares) == {("gpu", "H"), ("gpu", "OC"), ("cpu", "H"), ("cpu", "OC")}
    assert all(s == set(space.FULL_GRID) for s in shares.values())


def test_random_specs_in_codl_ranges():
    specs = space.sample_specs(60, seed=1, max_flops=1e8)
    assert len(specs) == 60 and len({s.kind for s in specs}) >= 4
    for s in specs:
        assert 1 <= s.H <= 640 and s.flops <= 1e8 and s.KH <= 7 and s.SH <= 2
        if s.kind == "conv2d":
            assert 3 <= s.IC <= 4096 and 32 <= s.OC <= 4096


def test_sampler_draws_channels_and_kernels_as_cnns_have_them():
    """Regression: log-uniform channels were almost never multiples of 32, so
    1x1 convs that run the direct NCHWc kernel never got random samples."""
    specs = space.sample_specs(400, seed=3, max_flops=1e9, kinds=["conv2d"])
    assert {s.kind for s in specs} == {"conv2d"}
    lo_ic, hi_ic = space.CODL_RANGES["IC"]
    lo_oc, hi_oc = space.CODL_RANGES["OC"]
    assert all(lo_ic <= s.IC <= hi_ic and lo_oc <= s.OC <= hi_oc for s in specs)
    assert np.mean([s.OC % 32 == 0 for s in specs]) >= 0.4
    assert np.mean([s.KH in (1, 3) for s in specs]) >= 0.6
    one_by_one_blocks = [s for s in specs if s.KH == 1 and s.OC % 32 == 0]
    assert len(one_by_one_blocks) >= 20


def test_sampler_refuses_unknown_kinds():
    with pytest.raises(ValueError, match="unknown op kinds \\['conv3d'\\]"):
        space.sample_specs(5, kinds=["conv3d"])


def test_deep_stratum_draws_tail_layers_with_weights_past_the_l2s():
    """Regression: the quick draw's FLOPs cap left no conv with weights past the
    cores' L2s, so held-out YOLO-V2's 13x13 x1024 layers were extrapolated."""
    specs = space.deep_specs(48, seed=2)
    assert len(specs) == 48 and {s.kind for s in specs} == {"conv2d"}
    lo_hw, hi_hw = space.DEEP_RANGES["HW"]
    lo_c, hi_c = space.DEEP_RANGES["C"]
    for s in specs:
        assert lo_hw <= s.H <= hi_hw and lo_c <= s.IC <= hi_c and lo_c <= s.OC <= hi_c
        assert s.flops <= space.DEEP_MAX_FLOPS and s.KH <= min(7, s.H)
    weight_mib = [s.IC * s.OC * s.KH * s.KW * 4 / 2**20 for s in specs]
    assert np.mean([w > 16 for w in weight_mib]) >= 0.3
    assert space.deep_specs(48, seed=2) == specs


def test_body_stratum_draws_body_layers_past_the_quick_caps():
    """Regression: under the quick draw's 1e8 FLOPs cap no random row of the H100
    file was a CNN body layer, nor a direct 1x1 conv with input planes over 32 KB."""
    from codl_tvm.predictor.mirror import kernel

    specs = space.body_specs(48, seed=2)
    assert len(specs) == 48 and {s.kind for s in specs} == {"conv2d"}
    lo_f, hi_f = space.BODY_FLOPS
    for s in specs:
        assert space.BODY_RANGES["HW"][0] <= s.H <= space.BODY_RANGES["HW"][1]
        assert space.BODY_RANGES["IC"][0] <= s.IC <= space.BODY_RANGES["IC"][1]
        assert space.BODY_RANGES["OC"][0] <= s.OC <= space.BODY_RANGES["OC"][1]
        assert lo_f <= s.flops <= hi_f and s.KH <= 7
    assert np.mean([s.flops > 1e8 for s in specs]) == 1.0
    direct_k1 = [s for s in specs
                 if s.KH == 1 and kernel("cpu", s, reference()).algorithm == "direct-nchwc"]
    assert sum(s.H * s.W * 4 > 32 << 10 for s in direct_k1) >= 3
    assert space.body_specs(48, seed=2) == specs


def test_pointwise_stratum_draws_stride_one_1x1_convs():
    specs = space.stratum_specs("pointwise", 24, seed=2)
    assert len(specs) == 24 and {(s.KH, s.KW, s.SH, s.SW) for s in specs} == {(1, 1, 1, 1)}
    lo, hi = space.STRATA["pointwise"].hw
    assert all(lo <= s.H <= hi and s.pad == (0, 0, 0, 0) for s in specs)
    assert len({s.H for s in specs}) > 12 and space.stratum_specs("pointwise", 24, 2) == specs


def test_downsample_stratum_draws_stride_two_1x1_convs():
    """The training draw had no 1x1 stride-2 conv (ResNets' shortcuts)."""
    from codl_tvm.predictor.mirror import kernel

    specs = space.stratum_specs("downsample", 24, seed=3)
    assert len(specs) == 24 and {(s.KH, s.KW, s.SH, s.SW) for s in specs} == {(1, 1, 2, 2)}
    st = space.STRATA["downsample"]
    assert all(st.hw[0] <= s.H <= st.hw[1] and s.pad == (0, 0, 0, 0) for s in specs)
    assert all(st.flops[0] <= s.flops <= st.flops[1] for s in specs)
    assert {kernel("cpu", s, reference()).algorithm for s in specs} == {"direct-nchwc"}


def test_pools_stratum_draws_padded_3x3_and_global_pools():
    """The training draw's pools never pad and are never global (ResNet's padded
    3x3/2 max pool and its global average pool were regimes no sample had)."""
    from codl_tvm.predictor.mirror import kernel

    specs = space.stratum_specs("pools", 40, seed=18)
    assert len(specs) == 40 and {s.kind for s in specs} == {"pool_max", "pool_avg"}
    padded = [s for s in specs if s.pad == (1, 1, 1, 1)]
    glob = [s for s in specs if (s.out_h, s.out_w) == (1, 1)]
    assert len(padded) + len(glob) == 40 and len(padded) >= 15 and len(glob) >= 10
    assert all(s.KH == 3 and s.SH in (1, 2) and 7 <= s.H <= 224 for s in padded)
    assert all(s.KH == s.H and 4 <= s.H <= 32 and s.pad == (0, 0, 0, 0) for s in glob)
    assert all(s.IC == s.OC and 16 <= s.IC <= 2048 for s in specs)
    algos = {kernel("gpu", s, reference()).algorithm for s in glob if s.kind == "pool_avg"}
    assert "global-reduction" in algos
    assert space.stratum_specs("pools", 40, seed=18) == specs


def test_strata_specs_refuses_unknown_names_and_negative_counts():
    with pytest.raises(ValueError, match=r"unknown strata \['tail'\]: choose from \['deep'"):
        space.strata_specs({"tail": 2})
    with pytest.raises(ValueError, match="negative stratum counts {'body': -1}"):
        space.strata_specs({"body": -1})
    assert space.strata_specs({}) == []


@pytest.mark.parametrize("name", list(space.STRATA))
def test_make_jobs_adds_a_stratum_on_request(name):
    from codl_tvm.profiler import make_jobs

    model = space.STRATA[name].model
    plain = make_jobs(quick=True, sharing=False, n_specs=3)
    jobs = make_jobs(quick=True, sharing=False, n_specs=3, strata={name: 2})
    drawn = [j for j in jobs if j.model == model]
    assert {j.spec for j in drawn} == set(space.stratum_specs(name, 2, 0)) and len(drawn) >= 8
    assert [j for j in jobs if j.model != model] == plain


@pytest.mark.parametrize("flag", [f"--{name}" for name in space.STRATA])
def test_profile_cli_refuses_a_negative_stratum_count(capsys, flag):
    from codl_tvm.cli import main

    with pytest.raises(SystemExit) as err:
        main(["profile", flag, "-3", "-o", "x.csv"])
    assert err.value.code == 2
    assert f"{flag}: -3: a count of ops is 0 or more" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["profile", "profile-bundle"])
@pytest.mark.parametrize(("shares", "says"), [("0,0.5", "a share is in (0, 1]"),
                                              ("0.5,half", "shares are numbers")])
def test_profile_cli_refuses_shares_out_of_range(capsys, command, shares, says):
    from codl_tvm.cli import main

    with pytest.raises(SystemExit) as err:
        main([command, "--pair", "cpu-pair", "--shares", shares, "-o", "x"])
    assert err.value.code == 2
    assert says in capsys.readouterr().err


def test_profile_measures_the_shares_asked(tmp_path):
    from codl_tvm.cli import build_parser
    from codl_tvm.commands.profile import _sampling_options
    from codl_tvm.profiler import make_jobs

    wl = tmp_path / "w.csv"
    wl.write_text("CNN,IH,IW,IC,OC,KH,KW,SH,SW,PT,PH,PW,DH,DW\nX,28,28,64,64,3,3,1,1,1,0,0,1,1\n")
    args = build_parser().parse_args(["profile", "--workload", str(wl), "--shares", "0.2,1.0",
                                      "--no-sharing", "-o", "x.csv"])
    jobs = make_jobs(workloads=args.workload, **_sampling_options(args))
    assert {round(j.share, 6) for j in jobs} == {0.2, 1.0}  # each processor's share


def test_max_flops_skips_a_workloads_larger_ops(tmp_path):
    # regression: --max-flops filtered only the random draw; a workload's ops were all measured
    from codl_tvm.profiler import make_jobs

    wl = tmp_path / "w.csv"
    wl.write_text("CNN,IH,IW,IC,OC,KH,KW,SH,SW,PT,PH,PW,DH,DW\n"
                  "X,28,28,64,64,3,3,1,1,1,0,0,1,1\nX,224,224,64,64,3,3,1,1,1,0,0,1,1\n")
    sizes = {j.spec.H for j in make_jobs(workloads=[wl], sharing=False)}
    assert sizes == {28, 224}
    small = make_jobs(workloads=[wl], sharing=False, max_flops=1e9)  # 28x28: 58 MFLOPs
    assert {j.spec.H for j in small} == {28}


def test_the_default_profile_measures_six_shares_of_each_op():
    # every tenth of 400 ops was 15,848 jobs on the cpu-pair: over an hour on 2 cores
    from codl_tvm.profiler import make_jobs

    jobs = make_jobs(n_specs=12, sharing=False)
    assert {round(j.share, 6) for j in jobs} == set(space.DEFAULT_GRID)
    wl_jobs = make_jobs(workloads=[space_workload()], sharing=False)
    assert {round(j.share, 6) for j in wl_jobs} == set(space.FULL_GRID)  # workloads: tenths


def space_workload():
    from codl_tvm.profiler.coverage import USAGE_DIR

    return USAGE_DIR / "pool2d.csv"
