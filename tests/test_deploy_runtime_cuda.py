"""Runtime-only artifacts for a CUDA pair: built here (no GPU), inspected and refused cleanly in a
runtime-only process; executed in one where a GPU exists."""

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
from codl_tvm import Plan

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cuda_exe():
    rng = np.random.default_rng(0)

    def body(bb, x):
        x = conv(bb, x, rng, 8, 3, padding=(1, 1, 1, 1), bias=True)
        return bb.emit(rop.nn.max_pool2d(x, (2, 2), (2, 2)))

    mod = codl_tvm.load_model(single_function((1, 3, 16, 16), body))
    pair = codl_tvm.DevicePair.preset("x86-cuda", arch="sm_90")
    return codl_tvm.compile(mod, pair, Plan.uniform(mod, "H", 0.75))


def _runtime_only(code: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=300)


# `python -m codl_tvm.runtime`
RUNTIME_MAIN = ("import runpy; "
                "runpy.run_module('codl_tvm.runtime', run_name='__main__', alter_sys=True)")

INSPECT = """
import json, sys
from codl_tvm import runtime
assert "tvm.relax" not in sys.modules
art = sys.argv[1]
m = json.load(open(f"{art}/{runtime.MANIFEST}"))
assert m["format"] == runtime.ARTIFACT_FORMAT and m["version"] == runtime.ARTIFACT_VERSION
print(json.dumps({"devices": m["devices"], "pair": m["pair"]["name"],
                  "inputs": [s["role"] for s in m["inputs"]],
                  "roles": sorted({p["role"] for p in m["params"]})}))
"""


def test_x86_cuda_artifact_is_readable_with_only_the_runtime(cuda_exe, tmp_path):
    art = cuda_exe.export(tmp_path / "cuda-art")
    proc = _runtime_only(INSPECT, str(art))
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = json.loads(proc.stdout)
    assert info == {"devices": [["cuda", 0], ["cpu", 0]], "pair": "x86-cuda",
                    "inputs": ["gpu"], "roles": ["cpu", "gpu"]}
    # the library carries the CUDA kernels as source (compiled on load, by nvcc/NVRTC there)
    assert b"__global__" in (art / "lib.so").read_bytes()


def test_runtime_cli_without_a_gpu_fails_in_one_line(cuda_exe, tmp_path):
    import tvm

    if tvm.cuda(0).exist:
        pytest.skip("this machine has a GPU")
    art = cuda_exe.export(tmp_path / "cuda-art")
    proc = _runtime_only(RUNTIME_MAIN, str(art))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("python -m codl_tvm.runtime: error:"), lines[0]


@pytest.mark.gpu
def test_runtime_only_cuda_run_matches_full_tvm(cuda_exe, tmp_path):
    art = cuda_exe.export(tmp_path / "cuda-art")
    inputs = cuda_exe.random_inputs(seed=2)
    np.savez(tmp_path / "x.npz", **inputs)
    proc = _runtime_only(RUNTIME_MAIN,
                         str(art), "--inputs", str(tmp_path / "x.npz"), "-o",
                         str(tmp_path / "y.npz"), "--time", "--repeat", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    with np.load(tmp_path / "y.npz") as out:
        np.testing.assert_allclose(out["output_0"], cuda_exe.run(inputs)[0], rtol=1e-5,
                                   atol=1e-5)
