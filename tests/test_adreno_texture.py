"""Adreno texture path: NCHW4c rewrite of the GPU sub-ops, its numbers, and an android build."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from helpers import conv, reference, rel_err, single_function
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import relax
from tvm.relax import op as rop
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

import codl_tvm
from codl_tvm import DevicePair, Plan, runtime
from codl_tvm.deploy.cross import export_for_device, library_contents
from codl_tvm.executable import artifact_parts
from codl_tvm.passes import UseAdrenoTexture
from codl_tvm.pipeline import codl_pipeline

TEXTURE_KEYS = ["adreno", "opencl", "gpu", "texture"]


def adreno_texture_pair() -> DevicePair:
    """The android-adreno pair with its GPU on Adreno's texture path (qcom/adreno-opencl-texture
    keys; a no-op once the preset carries them)."""
    doc = DevicePair.preset("android-adreno").to_json()
    doc["gpu"] = dict(doc["gpu"], keys=TEXTURE_KEYS)
    return DevicePair.from_json(doc)


# ---- 1. structure --------------------------------------------------------------------------
@I.ir_module
class Before:
    I.module_global_infos({"vdevice": [I.vdevice({"kind": "llvm"}, 1, "global"),
                                       I.vdevice({"kind": "llvm"}, 0, "global")]})

    @R.function
    def main(x: R.Tensor((1, 3, 8, 8), "float32", "llvm:0"),
             w: R.Tensor((6, 3, 3, 3), "float32")) -> R.Tensor((1, 6, 6, 6), "float32", "llvm:0"):
        with R.dataflow():
            xg = R.strided_slice(x, [2], [0], [5])
            xc = R.to_vdevice(R.strided_slice(x, [2], [3], [8]), "llvm:1")
            yg: R.Tensor((1, 6, 3, 6), "float32", "llvm:0") = R.nn.conv2d(xg, w)
            yc: R.Tensor((1, 6, 3, 6), "float32", "llvm:1") = R.nn.conv2d(xc, w)
            y = R.concat((yg, R.to_vdevice(yc, "llvm:0")), axis=2)
            R.output(y)
        return y


@I.ir_module
class Expected:
    I.module_global_infos({"vdevice": [I.vdevice({"kind": "llvm"}, 1, "global"),
                                       I.vdevice({"kind": "llvm"}, 0, "global")]})

    @R.function
    def main(x: R.Tensor((1, 3, 8, 8), "float32", "llvm:0"),
             w: R.Tensor((6, 3, 3, 3), "float32")) -> R.Tensor((1, 6, 6, 6), "float32", "llvm:0"):
        with R.dataflow():
            xg = R.strided_slice(x, [2], [0], [5])
            xc = R.to_vdevice(R.strided_slice(x, [2], [3], [8]), "llvm:1")
            xp = R.nn.pad(xg, [0, 0, 0, 1, 0, 0, 0, 0])
            x5 = R.layout_transform(xp, index_map=lambda n, c, h, w: (n, c // 4, h, w, c % 4))
            wp = R.nn.pad(w, [0, 0, 0, 1, 0, 0, 0, 0])
            w5 = R.layout_transform(wp, index_map=lambda o, i, h, w: (o // 4, i, h, w, o % 4),
                                    pad_value=T.float32(0))
            y5 = R.nn.conv2d(x5, w5, data_layout="NCHW4c", kernel_layout="OIHW4o",
                             out_layout="NCHW4c")
            y8 = R.layout_transform(y5, index_map=lambda n, c, h, w, b: (n, c * 4 + b, h, w))
            yg = R.strided_slice(y8, [1], [0], [6])
            yc: R.Tensor((1, 6, 3, 6), "float32", "llvm:1") = R.nn.conv2d(xc, w)
            y = R.concat((yg, R.to_vdevice(yc, "llvm:0")), axis=2)
            R.output(y)
        return y


def test_rewrite_structure_gpu_side_only():
    after = UseAdrenoTexture(force=True)(Before)
    tvm.ir.assert_structural_equal(after, Expected)


def test_rewrite_is_off_without_texture_key():
    # Before's GPU role is a plain llvm device: nothing has the texture key
    tvm.ir.assert_structural_equal(UseAdrenoTexture()(Before), Before)


def test_constant_weights_are_transformed_on_the_host():
    rng = np.random.default_rng(0)
    mod = codl_tvm.load_model(single_function(
        (1, 5, 8, 8), lambda bb, x: conv(bb, x, rng, 7, 3, padding=(1, 1, 1, 1))))
    out = codl_pipeline(DevicePair.preset("cpu-pair"), Plan.uniform(mod, "H", 0.5),
                        until="partition", texture=True)(mod)
    text = out["main"].script()
    assert text.count('data_layout="NCHW4c"') == 1 and text.count('data_layout="NCHW"') == 1
    w5 = [c for c in _constants(out["main"]) if c.ndim == 5]
    assert len(w5) == 1 and w5[0].shape == (2, 8, 3, 3, 4)  # O 7->8, I 5->8, no weight kernel


def _constants(func: relax.Function) -> list[np.ndarray]:
    found: list[np.ndarray] = []
    relax.analysis.post_order_visit(
        func.body, lambda n: found.append(n.value.numpy()) if isinstance(n, tvm.ir.Constant)
        and hasattr(n.value, "numpy") else None)
    return found


# ---- 2. numbers (the rewrite is target independent: cpu-pair, GPU role forced) -----------------
def _run_texture_pipeline(mod, pair, plan, inputs):
    lowered, params, manifest = artifact_parts(
        mod, codl_pipeline(pair, plan, texture=True)(mod), pair, plan)
    assert 'data_layout="NCHW4c"' not in lowered["main"].script()  # all legalized
    exe = tvm.compile(lowered, target=None, relax_pipeline=None)
    return runtime.Runner(exe, manifest, params).run(inputs), lowered


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ic=st.integers(1, 6), oc=st.integers(1, 9), h=st.integers(3, 12), k=st.sampled_from([1, 3]),
    stride=st.sampled_from([1, 2]), ratio=st.sampled_from([0.1, 0.5, 0.9]),
    dim=st.sampled_from(["H", "OC"]),
)
def test_texture_layout_matches_unsplit(ic, oc, h, k, stride, ratio, dim):
    # conv2d only: the project's llvm ApplySchedules cannot build a 5-D (NCHW4c) max_pool2d
    # ("Unknown device id"), which the forced cpu-pair would hand it; on Adreno the pool is
    # scheduled by dl.adreno.Pool2D (compile test below)
    rng = np.random.default_rng(ic * 100 + oc)

    def body(bb, x):
        return conv(bb, x, rng, oc, k, stride=stride, padding=(k // 2,) * 4, bias=True)

    mod = codl_tvm.load_model(single_function((1, ic, h, h + 1), body))
    inputs = {"x": rng.standard_normal((1, ic, h, h + 1)).astype("float32")}
    out, lowered = _run_texture_pipeline(mod, DevicePair.preset("cpu-pair"),
                                         Plan.uniform(mod, dim, ratio), inputs)
    assert rel_err(out[0], reference(mod, inputs)[0]) <= 1e-5
    # every GPU-role conv (vdevice 0: "_d0" kernels) went through the NCHW4c kernel
    gpu_convs = [gv.name_hint for gv in lowered.functions
                 if "conv2d" in gv.name_hint and gv.name_hint.endswith("_d0")]
    assert all("NCHWc" in name for name in gpu_convs)


def test_one_row_gpu_part_matches_unsplit():
    rng = np.random.default_rng(3)
    mod = codl_tvm.load_model(single_function(
        (1, 3, 9, 9), lambda bb, x: conv(bb, x, rng, 5, 3, stride=2, padding=(1, 1, 1, 1))))
    plan = Plan.uniform(mod, "H", 0.2)  # 5 output rows: the GPU gets one
    inputs = {"x": rng.standard_normal((1, 3, 9, 9)).astype("float32")}
    out, _ = _run_texture_pipeline(mod, DevicePair.preset("cpu-pair"), plan, inputs)
    assert rel_err(out[0], reference(mod, inputs)[0]) <= 1e-5


# ---- 3. android-adreno build ---------------------------------------------------------------
def _model():
    rng = np.random.default_rng(0)

    def body(bb, x):
        x = conv(bb, x, rng, 6, 3, padding=(1, 1, 1, 1), bias=True)
        return bb.emit(rop.nn.max_pool2d(x, (2, 2), (2, 2)))

    return codl_tvm.load_model(single_function((1, 3, 16, 16), body))


def _sources(module) -> dict[str, str]:
    out = {}
    for m in [module, *module.imports]:
        out.setdefault(m.kind, "")
        try:
            out[m.kind] += m.inspect_source()
        except Exception:  # noqa: BLE001 - some module kinds keep no source
            pass
        for kind, text in _sources_of_imports(m).items():
            out[kind] = out.get(kind, "") + text
    return out


def _sources_of_imports(module) -> dict[str, str]:
    return _sources(module.imports[0]) if module.imports and module.imports[0] is not module else {}


@pytest.fixture(scope="module")
def adreno_exe():
    mod = _model()
    return codl_tvm.compile(mod, adreno_texture_pair(), Plan.uniform(mod, "H", 0.5))


def test_gpu_sub_op_uses_images(adreno_exe):
    opencl = "".join(m.inspect_source() for m in _all(adreno_exe.vm_exec.mod)
                     if m.kind == "opencl")
    for word in ("image2d_array_t", "write_imagef", "READ_IMAGEF(image, sampler, coord) "
                 "read_imagef"):
        assert word in opencl
    # the conv2d GPU sub-op reads its input image and writes its output image
    bodies = [c for c in opencl.split("// Function: ") if c.startswith("conv2d_NCHWc_OIHWo_d0_tex")]
    assert any("READ_IMAGEF(lv" in c for c in bodies)  # its input (padded) image
    assert any("write_imagef(conv2d_NCHWc_OIHWo_ptr" in c for c in bodies)
    lowered = adreno_exe.mod.script()
    assert "global.texture" in lowered
    # the CPU sub-op stays NCHW on the aarch64 llvm target
    cpu = [gv.name_hint for gv, f in adreno_exe.mod.functions.items()
           if isinstance(f, tvm.tirx.PrimFunc) and "target" in f.attrs
           and f.attrs["target"].kind.name == "llvm"]
    # fused with its epilogue (the version that reads its weight packed: PrepackWeights)
    assert any("conv2d" in n and n.endswith("_prepacked_d1") for n in cpu)


def _all(module):
    out = [module]
    for m in module.imports:
        out += _all(m)
    return out


def test_texture_tensors_are_image_views_of_gpu_buffers(adreno_exe):
    # BackTexturesWithBuffers: every storage is a plain buffer on runtime device 0 or 1 (an
    # image storage of a 1-D byte shape cannot be made, and the pool would hand a freed image
    # out as a buffer); each texture tensor names a texture vdevice, so the VM views it as an
    # image of that buffer
    text = adreno_exe.mod["main"].script()
    storages = [line for line in text.splitlines() if "alloc_storage" in line]
    assert storages and not any("texture" in line for line in storages)
    vdevices = adreno_exe.mod.global_infos["vdevice"]
    texture = {i for i, v in enumerate(vdevices) if "texture" in v.memory_scope}
    views = [line for line in text.splitlines()
             if "= R.vm.alloc_tensor" in line and "global.texture" in line.split(" = R.vm")[0]]
    assert views and texture
    assert all(int(v.rsplit(",", 1)[1].strip(" )")) in texture for v in views)
    assert adreno_exe.manifest["devices"] == [["opencl", 0], ["cpu", 0]]


def test_artifact_tar_holds_aarch64_and_image_kernels(adreno_exe, tmp_path, monkeypatch):
    monkeypatch.delenv("TVM_NDK_CC", raising=False)
    art = export_for_device(adreno_exe, tmp_path / "phone")
    rows = library_contents(art)
    assert rows and {r["machine"] for r in rows} == {"aarch64"}
    assert sum(r["opencl_kernels"] for r in rows) >= 3
    import tarfile

    with tarfile.open(art / "lib.tar") as tar:
        blob = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    assert b"write_imagef" in blob and b"image2d_array_t" in blob
    cpu_conv = next(gv.name_hint for gv in adreno_exe.mod.functions
                    if "conv2d" in gv.name_hint and gv.name_hint.endswith("_prepacked_d1"))
    assert cpu_conv.encode() in blob  # the CPU sub-op's aarch64 kernel
