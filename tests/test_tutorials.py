"""The tutorials run, as a user runs them: each script in its own interpreter, on cpu-pair."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ImportError:
        return True


# script -> (module it needs, words its output must show)
CASES = {
    "01_partition_onnx.py": (None, ["conv2d_0", "relative error vs unsplit", "artifact"]),
    "02_profile_and_train.py": (None, ["measured", "MAPE", "total_us"]),
    "03_plan_bench_explain.py": ("codl_tvm.commands.plan",
                                 ["$ codl-tvm plan", "latency_ms", "timeline", "CPU only"]),
    "04_android_opencl_rpc.py": ("codl_tvm.deploy.rpc",
                                 ["aarch64-linux-android", "opencl", "remote run matches"]),
}  # fmt: skip


def test_every_tutorial_is_tested():
    assert sorted(p.name for p in TUTORIALS.glob("[0-9]*.py")) == sorted(CASES)


@pytest.mark.parametrize("script", sorted(CASES))
def test_tutorial_runs(script, tmp_path):
    needs, words = CASES[script]
    if needs and _missing(needs):
        pytest.skip(f"{needs} is not there yet: the tutorial needs it")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, str(TUTORIALS / script), "--quick", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for word in words:
        assert word in proc.stdout, (word, proc.stdout[-3000:])
