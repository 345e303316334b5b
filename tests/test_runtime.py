"""Artifacts: export, runtime-only execution in a fresh process, and clean failure."""

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
def exe():
    rng = np.random.default_rng(0)

    def body(bb, x):
        x = conv(bb, x, rng, 6, 3, padding=(1, 1, 1, 1), bias=True)
        return bb.emit(rop.nn.max_pool2d(x, (2, 2), (2, 2)))

    mod = codl_tvm.load_model(single_function((1, 3, 12, 12), body))
    return codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"),
                            Plan.uniform(mod, "OC", 0.5))


def test_runtime_only_process_gives_the_same_outputs(exe, tmp_path):
    art = exe.export(tmp_path / "art")
    assert sorted(p.name for p in art.iterdir()) == ["lib.so", "manifest.json", "params.npz"]
    inputs = exe.random_inputs(seed=3)
    np.savez(tmp_path / "x.npz", **inputs)
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", PYTHONPATH=str(ROOT))
    # `python -m codl_tvm.runtime`, then a check that nothing on the way imported the compiler
    code = ("import runpy, sys\n"
            "try:\n"
            "    runpy.run_module('codl_tvm.runtime', run_name='__main__', alter_sys=True)\n"
            "finally:\n"
            "    assert 'tvm.relax' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code, str(art), "--inputs",
                           str(tmp_path / "x.npz"), "-o", str(tmp_path / "out.npz"), "--time",
                           "--repeat", "3"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "median latency" in proc.stdout
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["output_0"], exe.run(inputs)[0])


def test_manifest_places_inputs_and_cpu_weights(exe):
    m = exe.manifest
    assert [s["role"] for s in m["inputs"]] == ["gpu"]
    assert {p["role"] for p in m["params"]} == {"cpu", "gpu"}
    assert m["devices"] == [["cpu", 1], ["cpu", 0]]
    json.dumps(m)  # plain JSON


def test_failed_export_leaves_nothing(exe, tmp_path, monkeypatch):
    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", explode)
    with pytest.raises(OSError, match="disk full"):
        exe.export(tmp_path / "art")
    assert list(tmp_path.iterdir()) == []


def test_missing_input_and_wrong_shape(exe):
    with pytest.raises(KeyError, match="missing input 'x'"):
        exe.run({})
    with pytest.raises(ValueError, match="has shape"):
        exe.run({"x": np.zeros((1, 3, 5, 5), "float32")})


def test_runtime_cli_rejects_a_non_artifact(tmp_path):
    from codl_tvm.commands.artifact import runtime_main

    assert runtime_main([str(tmp_path)]) == 1


def test_input_on_the_cpu_for_a_cpu_only_plan():
    rng = np.random.default_rng(1)
    mod = codl_tvm.load_model(single_function((1, 2, 6, 6), lambda bb, x: conv(bb, x, rng, 3, 3)))
    exe = codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"), Plan.single(mod, "cpu"))
    assert exe.manifest["inputs"][0]["role"] == "cpu"
    x = rng.standard_normal((1, 2, 6, 6)).astype("float32")
    np.testing.assert_allclose(exe.run({"x": x})[0],
                               codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair")).run(
                                   {"x": x})[0], rtol=1e-6)


def test_set_input_would_move_cpu_weights_to_devices0_so_the_runner_calls_main_directly():
    """TVM_NOTES / apache/tvm#17884: ``set_input`` moves every argument to ``devices[0]``.
    On the cpu-pair the kernels check device ids, so the stateful API fails where the direct
    call (what :class:`codl_tvm.runtime.Runner` does) gives the right answer. Built unfused:
    its CPU bias add reads a tensor the VM allocates on the CPU beside a moved weight (a fused
    kernel reads moved tensors only, and the cpu-pair's two devices share memory)."""
    import tvm

    rng = np.random.default_rng(0)

    def body(bb, x):
        x = conv(bb, x, rng, 6, 3, padding=(1, 1, 1, 1), bias=True)
        return bb.emit(rop.nn.max_pool2d(x, (2, 2), (2, 2)))

    mod = codl_tvm.load_model(single_function((1, 3, 12, 12), body))
    exe = codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"),
                           Plan.uniform(mod, "OC", 0.5), fuse=False)
    runner = exe.runner
    inputs = exe.random_inputs(seed=5)
    args = runner._args(inputs)
    roles = [p["role"] for p in exe.manifest["params"] + exe.manifest["staging"]]
    assert [a.device.index for a in args[1:]] == [0 if r == "cpu" else 1 for r in roles]
    runner.vm.set_input("main", *args)
    with pytest.raises(Exception, match="device_id"):
        runner.vm.invoke_stateful("main")
    np.testing.assert_array_equal(runner.run(inputs)[0], exe.run(inputs)[0])
    assert tvm.cpu(1).exist


def test_export_without_weights_runs_with_random_weights_of_the_right_shapes(exe, tmp_path):
    from codl_tvm import runtime

    art = exe.export(tmp_path / "light", weights=False)
    assert not (art / "params.npz").exists()
    runner = runtime.load(art)
    (out,) = runner.run(exe.random_inputs())
    assert out.shape == exe.run(exe.random_inputs())[0].shape and np.isfinite(out).all()


def test_the_runner_sizes_tvms_cpu_pool_from_the_pairs_num_cores(exe, tmp_path):
    # TVM alone halves the logical CPUs on x86; the plan's pair says how many cores to use
    art = exe.export(tmp_path / "art")
    cores = json.loads((art / "manifest.json").read_text())["pair"]["cpu"]["num-cores"]
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    env.update(TVM_USE_RUNTIME_LIB="1", PYTHONPATH=str(ROOT))
    code = ("import sys, tvm; from codl_tvm import runtime; r = runtime.load(sys.argv[1]); "
            "r.run(r.random_inputs()); "
            "print(r.cpu_threads, tvm.get_global_func('runtime.NumThreads')())")
    proc = subprocess.run([sys.executable, "-c", code, str(art)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(cores)] * 2
