"""The native stream functions and 2-D copy (codl_tvm/native/streams.cc) against the Python
ones: the same answers from split models, bad arguments refused, and a clear choice between
them (the copy's geometry: test_lower_slices_to_block_copies, for both)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tvm
from test_stage_cross_device_copies import conv_model, extern_calls, rel_err

import codl_tvm
from codl_tvm import Plan, native, runtime, streams

PAIR = codl_tvm.DevicePair.preset("cpu-pair")
needs_compiler = pytest.mark.skipif(native.compiler() is None, reason="no C++ compiler")


@pytest.fixture
def restore_streams():
    yield
    streams.use()


@pytest.fixture
def native_streams():
    with streams.using("native"):
        yield


@needs_compiler
def test_native_stream_functions_do_nothing_on_a_cpu(native_streams):
    t = tvm.runtime.tensor(np.arange(4, dtype="float32"))
    for name in (streams.BEGIN, streams.COPIES_WAIT, streams.KERNELS_WAIT, streams.HOST_WAITS,
                 streams.END):
        assert tvm.get_global_func(name)(t) is None
    np.testing.assert_array_equal(t.numpy(), np.arange(4, dtype="float32"))


@needs_compiler
def test_native_functions_refuse_bad_arguments_in_one_line(native_streams):
    t = tvm.runtime.tensor(np.zeros(8, "float32"))
    with pytest.raises(Exception, match="wider than its pitch"):
        streams.copy_block(t, t, 0, 4, 0, 4, 8, 1)
    with pytest.raises(Exception, match="expected a tensor"):
        tvm.get_global_func(streams.BEGIN)(3)
    with pytest.raises(Exception, match="expected an integer"):
        tvm.get_global_func(streams.COPY_BLOCK)(t, t, 0, 4, 0, 4, 4)


@needs_compiler
@pytest.mark.parametrize("overlap", [True, False])
def test_a_split_model_answers_the_same_with_either_implementation(overlap):
    mod = conv_model(8, 16, 15, 3, 1, 1)
    x = np.random.default_rng(0).standard_normal((1, 8, 15, 16)).astype("float32")
    ref = codl_tvm.compile(mod, PAIR).run({"x": x})[0]
    exe = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "H", 0.6), overlap=overlap,
                           block_copies=True)
    calls = extern_calls(exe)
    assert streams.COPY_BLOCK in calls and (streams.BEGIN in calls) == overlap
    outs = {}
    for impl in ("python", "native"):
        with streams.using(impl) as chosen:
            assert chosen == impl
            # the VM looks its functions up when it is made: a new runner per implementation
            runner = runtime.Runner(exe.vm_exec, exe.manifest, exe.params)
        outs[impl] = [runner.run({"x": x})[0] for _ in range(2)]
    for out in outs["python"] + outs["native"]:
        assert rel_err(out, ref) <= 1e-5
        np.testing.assert_array_equal(out, outs["python"][0])


def test_an_unknown_implementation_is_named(restore_streams):
    with pytest.raises(ValueError, match="CODL_TVM_STREAMS='fast'"):
        streams.use("fast")


def test_the_environment_chooses_and_auto_falls_back_to_python(monkeypatch, tmp_path,
                                                               restore_streams):
    monkeypatch.setenv(streams.ENV, "python")
    assert streams.use() == "python"
    assert streams.implementation() == ("python", "asked for")
    # no compiler and nothing cached: auto runs the Python functions and says why
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.delenv(streams.ENV)
    assert streams.use() == "python"
    assert "no C++ compiler" in streams.implementation()[1]
    with pytest.raises(RuntimeError, match="CODL_TVM_STREAMS=native: no C\\+\\+ compiler"):
        streams.use("native")
    assert list(tmp_path.iterdir()) in ([], [tmp_path / "native"])


@needs_compiler
def test_the_library_is_built_once_into_its_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    path = native.build()
    assert path.parent == tmp_path / "native" and path.suffix == ".so"
    stamp = path.stat().st_mtime_ns
    assert native.build() == path and path.stat().st_mtime_ns == stamp
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left


def test_run_says_which_stream_functions_a_split_artifact_runs(tmp_path, capsys,
                                                               restore_streams):
    mod = conv_model(4, 8, 9, 3, 1, 1)
    split = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "H", 0.5), block_copies=True)
    whole = codl_tvm.compile(mod, PAIR)
    split.export(tmp_path / "split")
    whole.export(tmp_path / "whole")
    streams.use("python")
    runtime.run_and_report(runtime.load(tmp_path / "split"), None, None, False, 1)
    assert "stream functions: python (asked for)" in capsys.readouterr().out.splitlines()
    runtime.run_and_report(runtime.load(tmp_path / "whole"), None, None, False, 1)
    assert "stream functions" not in capsys.readouterr().out


@pytest.mark.parametrize(("value", "message"), [
    ("bogus", "CODL_TVM_STREAMS='bogus': expected one of auto, native, python"),
    ("native", "CODL_TVM_STREAMS=native: no C++ compiler to build streams.cc")])
def test_a_bad_setting_is_one_line_and_exit_1_where_a_model_loads(tmp_path, value, message):
    mod = conv_model(4, 8, 9, 3, 1, 1)
    codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "H", 0.5)).export(tmp_path / "art")
    env = {**os.environ, "CODL_TVM_STREAMS": value, "CXX": str(tmp_path / "no-compiler"),
           native.CACHE_ENV: str(tmp_path / "cache")}
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = subprocess.run([sys.executable, "-m", "codl_tvm.runtime", str(tmp_path / "art")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"python -m codl_tvm.runtime: error: {message}" + (
            " (set CXX, or install g++)" if value == "native" else "")]
    assert sorted(p.name for p in tmp_path.iterdir()) in (before, sorted([*before, "cache"]))
