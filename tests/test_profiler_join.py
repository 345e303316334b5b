"""``codl-tvm profile-join``: bundles built for one pair, measured as one run.

New shapes and control rows of a samples file measured in one interleaved run give the
instance's speed at the very time the new shapes ran (the H100 guest's CPU drifted 6% between
two runs a few minutes apart).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codl_tvm.cli import main as codl_main
from codl_tvm.device import DevicePair
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.profiler import read_samples, space
from codl_tvm.profiler.bundle import build_bundle, join_bundles

RUNNER = Path(__file__).parents[1] / "codl_tvm" / "profiler" / "bundle_runner.py"
NEW = [OpSpec("conv2d", 9, 9, 4, 8, 1, 1, 2, 2), OpSpec("pool_max", 8, 8, 4, 4, 2, 2, 2, 2)]
CONTROL = [OpSpec("dense", 1, 1, 64, 40)]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> tuple[Path, Path, int, int]:
    root = tmp_path_factory.mktemp("join")
    pair = DevicePair.preset("cpu-pair")
    new = space.compute_jobs(NEW, (0.5, 1.0))
    ctl = [dataclasses.replace(j, model="control") for j in space.compute_jobs(CONTROL, (1.0,))]
    build_bundle(pair, new, root / "new", progress=False)
    build_bundle(pair, ctl, root / "ctl", progress=False)
    return root / "new", root / "ctl", len(new), len(ctl)


@pytest.mark.slow  # two real builds and a runtime-only run: ~15 s
def test_joined_bundle_measures_both_interleaved(bundles, tmp_path) -> None:
    new, ctl, n_new, n_ctl = bundles
    man = join_bundles([new, ctl], tmp_path / "j")
    assert not (tmp_path / "j.partial").exists()
    files = [lib["file"] for lib in man["libs"]]
    assert files[:2] == ["b0_lib0.so", "b1_lib0.so"]  # the bundles alternate
    assert all((tmp_path / "j" / f).is_file() for f in files)
    out = tmp_path / "j.csv"
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", PYTHONPATH="")
    res = subprocess.run([sys.executable, str(RUNNER), str(tmp_path / "j"), "-o", str(out),
                          "--rounds", "2"], env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    rows = read_samples(out)
    assert len(rows) == n_new + n_ctl
    assert sum(r["model"] == "control" for r in rows) == n_ctl
    assert {r["op"] for r in rows} == {"conv2d", "pool_max", "dense"}


def test_join_refuses_other_pairs_duplicates_and_non_bundles(bundles, tmp_path, capsys) -> None:
    new, ctl, _, _ = bundles
    with pytest.raises(ValueError, match="is in both"):
        join_bundles([new, new], tmp_path / "dup")
    other = tmp_path / "other"
    other.mkdir()
    man = json.loads((ctl / "manifest.json").read_text())
    man["pair"] = dict(man["pair"], name="android-opencl")
    (other / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ValueError, match="differ in 'pair'"):
        join_bundles([new, other], tmp_path / "mixed")
    with pytest.raises(ValueError, match="not a profiling bundle"):
        join_bundles([new, tmp_path], tmp_path / "none")
    assert not (tmp_path / "dup").exists() and not (tmp_path / "mixed").exists()
    assert codl_main(["profile-join", str(new), str(other), "-o", str(tmp_path / "cli")]) == 1
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "join: error:" in err and "differ in 'pair'" in err


def test_codl_tvm_profile_join_writes_the_joined_bundle(bundles, tmp_path, capsys) -> None:
    new, ctl, n_new, n_ctl = bundles
    assert codl_main(["profile-join", str(new), str(ctl), "-o", str(tmp_path / "j")]) == 0
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert said["kernels"] == n_new + n_ctl
    man = json.loads((tmp_path / "j" / "manifest.json").read_text())
    assert man["joined"] == [str(new), str(ctl)]
