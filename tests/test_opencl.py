"""OpenCL: the runtime plugin's loader, and the texture path's pooling checked structurally;
where an OpenCL device and the plugin are (``tools/opencl-runtime/build.sh``), splits and the
texture path run for real and must equal the unsplit model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from tvm import te, topi
from tvm.s_tir import dlight as dl

import codl_tvm
from codl_tvm import DevicePair, Plan, opencl_runtime, runtime, zoo
from codl_tvm.device import _host_cpu_target
from codl_tvm.plan import OpPlacement
from codl_tvm.schedules.texture_pool import TexturePool2D

ADRENO = {"kind": "opencl", "device": "adreno", "keys": ["adreno", "opencl", "gpu", "texture"]}


# ---- the plugin's loader -----------------------------------------------------------------
def test_plugin_is_found_as_a_file_or_a_build_folder(tmp_path, monkeypatch):
    lib = tmp_path / "libtvm_runtime_opencl.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("CODL_TVM_OPENCL_RUNTIME", str(lib))
    assert opencl_runtime.plugin_path() == lib
    monkeypatch.setenv("CODL_TVM_OPENCL_RUNTIME", str(tmp_path))
    assert opencl_runtime.plugin_path("host-ptr") == tmp_path / opencl_runtime.PLUGIN["host-ptr"]


def test_unknown_buffer_kind_is_named(monkeypatch):
    monkeypatch.setenv("CODL_TVM_OPENCL_BUFFERS", "pinned")
    with pytest.raises(ValueError, match="CODL_TVM_OPENCL_BUFFERS='pinned'"):
        opencl_runtime.plugin_path()


def test_a_named_plugin_that_is_missing_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(opencl_runtime, "_loaded", {})
    monkeypatch.setenv("CODL_TVM_OPENCL_RUNTIME", str(tmp_path / "nowhere.so"))
    with pytest.raises(FileNotFoundError, match="nowhere.so"):
        opencl_runtime.enable_opencl()


def test_x86_opencl_pair_detects_the_host_cpu():
    pair = DevicePair.preset("x86-opencl")
    assert pair.gpu_spec == {"kind": "opencl"} and "mcpu" in pair.cpu_spec
    assert pair.runtime_kind("gpu") == "opencl"


def test_an_opencl_artifact_without_opencl_says_what_is_missing(tmp_path, monkeypatch):
    mod = codl_tvm.load_model(zoo.get("tiny-cnn"))
    codl_tvm.compile(mod, DevicePair.preset("x86-opencl")).export(tmp_path / "art")
    # the device is what this machine may have or not: take it away
    monkeypatch.setattr(runtime, "enable_opencl", lambda: False)
    monkeypatch.setattr(runtime, "opencl_plugin_path", lambda: None)
    with pytest.raises(RuntimeError, match="runs on OpenCL, and TVM has no OpenCL runtime"):
        runtime.load(tmp_path / "art")
    monkeypatch.setattr(runtime, "opencl_plugin_path", lambda: tmp_path / "lib.so")
    with pytest.raises(RuntimeError, match="finds no device"):
        runtime.load(tmp_path / "art")


# ---- the texture pool's accumulator (dl.adreno.Pool2D's is one lane wide) -----------------
def _pool_source(rule) -> str:
    x = te.placeholder((1, 2, 16, 16, 4), name="x")
    y = topi.nn.pool2d(x, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "max", layout="NCHW4c")
    target = tvm.target.Target(ADRENO)
    sch = rule.apply(te.create_prim_func([x, y]), target, False)
    lib = tvm.compile(sch.mod, target=target)
    return (lib.mod if hasattr(lib, "mod") else lib).imports[0].inspect_source()


def test_texture_pool_accumulates_all_four_lanes():
    # upstream's rule: a one-float accumulator that all four lanes write (only lane 3 is right)
    assert "(int4)(0, 0, 0, 0)" in _pool_source(dl.adreno.Pool2D())
    fixed = _pool_source(TexturePool2D())
    assert "float4 pool_max_local_ptr" in fixed and "(int4)(0, 0, 0, 0)" not in fixed


# ---- run for real ------------------------------------------------------------------------
def _conv_relu_pool(path, ic: int = 3, size: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, ic, 3, 3)).astype("float32"), "w")
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             oh.make_node("Relu", ["c"], ["r"]),
             oh.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                 [1, ic, size, size])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), path)
    return {"x": rng.standard_normal((1, ic, size, size)).astype("float32")}


def _run(mod, pair, plan, folder, inputs) -> np.ndarray:
    codl_tvm.compile(mod, pair, plan).export(folder)
    return runtime.load(folder).run(inputs)[0]


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.opencl
@pytest.mark.parametrize("dim", ["H", "OC"])
def test_split_on_opencl_equals_unsplit(tmp_path, dim):
    inputs = zoo.sample_inputs("tiny-cnn", seed=0)
    mod = codl_tvm.load_model(zoo.get("tiny-cnn"))
    pair = DevicePair.preset("x86-opencl")
    unsplit = _run(mod, pair, None, tmp_path / "gpu", inputs)
    cpu = _run(mod, pair, Plan.single(mod, "cpu"), tmp_path / "cpu", inputs)
    split = _run(mod, pair, Plan.uniform(mod, dim, 0.5, chain=True), tmp_path / dim, inputs)
    assert _rel(unsplit, cpu) < 1e-5
    assert _rel(split, unsplit) <= 1e-5


@pytest.mark.opencl
@pytest.mark.parametrize("dim", [None, "OC"])
def test_a_transformer_on_opencl_equals_the_cpu(tmp_path, dim):
    # the GPU's tiled matmul (dense layers, attention's batched matmuls, GELU epilogue), the K
    # loop's register prefetch and the combined Q/K/V projection, run by a real OpenCL device
    cfg = dict(input_shape=(8,), num_layers=1, hidden_size=64, num_heads=2,
               intermediate_size=128, vocab_size=50)
    mod = codl_tvm.load_model(zoo.get("bert-base", **cfg))
    rng = np.random.default_rng(0)
    inputs = {"input_ids": rng.integers(0, 50, (1, 8)), "attention_mask": np.ones((1, 8), int)}
    pair = DevicePair.preset("x86-opencl")
    cpu = _run(mod, pair, Plan.single(mod, "cpu"), tmp_path / "cpu", inputs)
    plan = Plan.uniform(mod, dim, 0.5) if dim else None
    assert _rel(_run(mod, pair, plan, tmp_path / "gpu", inputs), cpu) <= 1e-5


@pytest.mark.opencl
@pytest.mark.parametrize("dim", [None, "H", "OC"])
def test_texture_path_equals_nchw(tmp_path, dim):
    # a conv split, then a max pool on textures: the pool's lanes were wrong (TexturePool2D)
    inputs = _conv_relu_pool(tmp_path / "m.onnx")
    mod = codl_tvm.load_model(tmp_path / "m.onnx")
    nchw = _run(mod, DevicePair.preset("x86-opencl"), None, tmp_path / "nchw", inputs)
    texture = DevicePair("x86-adreno", _host_cpu_target(None), ADRENO)
    plan = Plan({"conv2d_0": OpPlacement("split", dim, 0.5)}) if dim else None
    err = _rel(_run(mod, texture, plan, tmp_path / "tex", inputs), nchw)
    assert err <= 1e-5, err

