"""Cross-compiled Android artifacts: a .tar of aarch64 objects holding the OpenCL kernels."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from helpers import conv, single_function
from tvm.relax import op as rop

import codl_tvm
from codl_tvm import Plan
from codl_tvm.cli import main as cli_main
from codl_tvm.deploy.cross import LINK_COMMAND, export_for_device, library_contents


def _model():
    rng = np.random.default_rng(0)

    def body(bb, x):
        x = conv(bb, x, rng, 8, 3, padding=(1, 1, 1, 1), bias=True)
        return bb.emit(rop.nn.max_pool2d(x, (2, 2), (2, 2)))

    return codl_tvm.load_model(single_function((1, 4, 16, 16), body))


@pytest.mark.parametrize("pair_name", ["android-opencl", "android-adreno"])
def test_tar_holds_aarch64_objects_and_opencl_kernels(pair_name, tmp_path, monkeypatch):
    monkeypatch.delenv("TVM_NDK_CC", raising=False)
    mod = _model()
    exe = codl_tvm.compile(mod, codl_tvm.DevicePair.preset(pair_name), Plan.uniform(mod, "H", 0.5))
    art = export_for_device(exe, tmp_path / "phone")
    assert sorted(p.name for p in art.iterdir()) == ["lib.tar", "manifest.json", "params.npz"]
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["library"] == "lib.tar" and manifest["link"] == LINK_COMMAND
    assert manifest["devices"] == [["opencl", 0], ["cpu", 0]]
    rows = library_contents(art)
    assert rows and {r["machine"] for r in rows} == {"aarch64"}
    kernels = sum(r["opencl_kernels"] for r in rows)
    # the GPU half of the split conv2d (and of the pool) is OpenCL code in the library
    assert kernels >= 2
    # the CPU half is aarch64 code: the llvm kernels are named _d1 (vdevice 1, the CPU)
    assert any(r["opencl_kernels"] == 0 and r["size_bytes"] > 0 for r in rows)


def test_compile_cli_cross_compiles_android_pairs(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TVM_NDK_CC", raising=False)
    import onnx  # noqa: F401 - the CLI reads ONNX

    from codl_tvm import zoo

    model = zoo.get("tiny-cnn") if "tiny-cnn" in zoo.list_models() else None
    if model is None:
        pytest.skip("zoo has no tiny-cnn")
    rc = cli_main(["compile", str(model), "--pair", "android-opencl", "-o", str(tmp_path / "a")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "link on a machine with the NDK" in out and (tmp_path / "a" / "lib.tar").exists()


@pytest.mark.skipif(not (os.environ.get("TVM_NDK_CC") and shutil.which(
    os.environ.get("TVM_NDK_CC", ""))), reason="TVM_NDK_CC (an Android NDK clang) is not set")
def test_ndk_builds_a_shared_library(tmp_path):
    mod = _model()
    exe = codl_tvm.compile(mod, codl_tvm.DevicePair.preset("android-opencl"))
    art = export_for_device(exe, tmp_path / "phone")
    data = (art / "lib.so").read_bytes()
    assert data[:4] == b"\x7fELF" and json.loads((art / "manifest.json").read_text())[
        "library"] == "lib.so"
