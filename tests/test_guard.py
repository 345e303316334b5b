"""compile(..., guard=True): a plan never runs slower than a single processor of the machine
at hand. The artifact carries the model built for each processor alone, and the runtime times
the three where it loads it and runs the fastest (runtime-only, like any artifact)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import conv, single_function
from tvm.relax import op as rop

import codl_tvm
from codl_tvm import Plan, runtime

ROOT = Path(__file__).resolve().parents[1]
PAIR = codl_tvm.DevicePair.preset("cpu-pair")


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)

    def body(bb, x):
        x = conv(bb, x, rng, 8, 3, padding=(1, 1, 1, 1), bias=True)
        return bb.emit(rop.nn.relu(x))

    return codl_tvm.load_model(single_function((1, 3, 16, 16), body))


@pytest.fixture(scope="module")
def guarded(model):
    return codl_tvm.compile(model, PAIR, Plan.uniform(model, "H", 0.5), guard=True)


def test_a_guarded_split_carries_each_processor_alone(guarded, model):
    assert set(guarded.alternatives) == {"gpu-only", "cpu-only"}
    for role in ("gpu", "cpu"):
        alone = guarded.alternatives[f"{role}-only"]
        assert alone.manifest["plan"] == Plan.single(model, role).to_json()
    # a single-processor plan has nothing to guard against
    assert not codl_tvm.compile(model, PAIR, Plan.single(model, "gpu"), guard=True).alternatives


def test_the_runtime_runs_the_fastest_and_says_what_it_measured(guarded, tmp_path):
    art = guarded.export(tmp_path / "art")
    manifest = json.loads((art / runtime.MANIFEST).read_text())
    assert [a["name"] for a in manifest["alternatives"]] == ["gpu-only", "cpu-only"]
    runner = runtime.load(art)
    assert runner.choice is not None and set(runner.choice["latency_ms"]) == {
        "plan", "gpu-only", "cpu-only"}
    ms = runner.choice["latency_ms"]
    assert ms[runner.choice["chosen"]] == min(ms.values())
    x = guarded.random_inputs(seed=1)
    ref = guarded.run(x)[0]
    np.testing.assert_allclose(runner.run(x)[0], ref, rtol=1e-5, atol=1e-6)
    # asked not to choose, or given weights (the alternatives hold their own): the plan
    assert runtime.load(art, choose=False).choice is None
    assert runtime.load(art, params=guarded.params).choice is None


def test_runtime_only_run_prints_the_guard_line(guarded, tmp_path):
    art = guarded.export(tmp_path / "art", weights=False)
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "codl_tvm.runtime", str(art)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("guard: runs "))
    assert "plan" in line and "gpu-only" in line and "cpu-only" in line


def test_guard_line_names_the_choice_and_the_others():
    line = runtime.guard_line({"chosen": "gpu-only",
                               "latency_ms": {"plan": 12.7, "gpu-only": 9.4, "cpu-only": 30.9}})
    assert line == "guard: runs gpu-only (9.400 ms; plan 12.700 ms, cpu-only 30.900 ms)"
