"""The ``tvm.backends`` entry point: ``import tvm`` alone makes the "codl" pipeline available."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINT = "codl_tvm.deploy.plugin:_autoload"

# user code that never imports codl_tvm
USER_CODE = """
import sys, numpy as np, tvm
from tvm import relax
assert "codl" in relax.pipeline.PIPELINE_MAP, "plugin not loaded"
bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType((1, 3, 8, 8), "float32"))
w = relax.const(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype("float32"))
with bb.function("main", [x]):
    with bb.dataflow():
        y = bb.emit_output(relax.op.nn.conv2d(x, w, padding=1))
    bb.emit_func_output(y)
plan = {"format": "codl-tvm-plan", "version": 1,
        "ops": {"conv2d_0": {"place": "split", "dim": "H", "ratio": 0.5}}}
mod = relax.get_pipeline("codl", pair="cpu-pair", plan=plan)(bb.get())
assert len(mod.global_infos["vdevice"]) == 2
kinds = {f.attrs["target"].kind.name for f in mod.functions.values()
         if "target" in (f.attrs or {})}
assert kinds == {"llvm"}, kinds
print("ok", len(mod.functions))
"""


def _run(extra_path: list[str], env_extra: dict[str, str] | None = None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*extra_path, str(ROOT)]),
               **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", USER_CODE], env=env, capture_output=True,
                          text=True, timeout=300)


def _dist_info(site: Path) -> None:
    """What ``pip install`` writes for the pyproject entry point (a .dist-info on sys.path)."""
    info = site / "codl_tvm-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: codl-tvm\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[tvm.backends]\ncodl = {ENTRY_POINT}\n")


def test_entry_point_registers_the_pipeline_in_a_fresh_process(tmp_path):
    _dist_info(tmp_path / "site")
    proc = _run([str(tmp_path / "site")])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ok")
    assert "Failed to autoload" not in proc.stderr


def test_without_the_entry_point_the_pipeline_is_absent(tmp_path):
    if any(ep.value == ENTRY_POINT for ep in importlib.metadata.entry_points(group="tvm.backends")):
        pytest.skip("codl-tvm is installed with its entry point")
    proc = _run([])
    assert proc.returncode != 0 and "plugin not loaded" in proc.stderr


def test_runtime_only_import_ignores_the_plugin(tmp_path):
    _dist_info(tmp_path / "site")
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-W", "error", "-c", "import tvm; print('ok')"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_installed_package_declares_the_entry_point():
    eps = [ep for ep in importlib.metadata.entry_points(group="tvm.backends")
           if ep.name == "codl"]
    if not eps:
        pytest.skip("codl-tvm is not installed with its tvm.backends entry point "
                    "(pip install -e . after the pyproject entry point is added)")
    assert eps[0].value == ENTRY_POINT
    proc = _run([])
    assert proc.returncode == 0, proc.stderr[-2000:]
