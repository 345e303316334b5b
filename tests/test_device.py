"""Device pairs: presets, JSON, and the vdevice order the VM relies on."""

from __future__ import annotations

import warnings

import pytest
import tvm

from codl_tvm import DevicePair


def test_cpu_pair_is_two_llvm_devices_gpu_role_first():
    pair = DevicePair.preset("cpu-pair")
    assert [v.vdevice_id for v in pair.vdevices] == [1, 0]
    assert pair.is_cpu_only and pair.runtime_kind("gpu") == "cpu"


@pytest.mark.parametrize("name, gpu_kind", [("x86-cuda", "cuda"), ("android-opencl", "opencl"),
                                            ("android-adreno", "opencl")])
def test_gpu_presets(name, gpu_kind):
    pair = DevicePair.preset(name, arch="sm_90")
    assert pair.gpu_target.kind.name == gpu_kind
    assert pair.gpu_target.host.kind.name == "llvm"
    assert pair.vdevices[0].target.kind.name == gpu_kind
    again = DevicePair.from_json(pair.to_json())
    assert again.to_json() == pair.to_json()


def test_android_presets_target_aarch64():
    assert DevicePair.preset("android-opencl").cpu_spec["mtriple"] == "aarch64-linux-android"
    assert "adreno" in DevicePair.preset("android-adreno").gpu_target.keys


def test_auto_without_gpu_says_it_falls_back():
    if tvm.cuda(0).exist:
        pytest.skip("this machine has a GPU")
    with pytest.warns(UserWarning, match="no CUDA GPU found"):
        assert DevicePair.preset("auto").name == "cpu-pair"


def test_x86_cuda_without_gpu_needs_arch():
    if tvm.cuda(0).exist:
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="pass arch"):
        DevicePair.preset("x86-cuda")


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown device pair 'tpu'"):
        DevicePair.preset("tpu")


def test_parse_takes_presets_and_json_target_dicts():
    assert DevicePair.parse("cpu-pair").name == "cpu-pair"
    pair = DevicePair.parse('{"cpu": {"kind": "llvm", "mcpu": "sapphirerapids"}, '
                            '"gpu": {"kind": "cuda", "arch": "sm_90"}}')
    assert pair.gpu_target.kind.name == "cuda" and pair.cpu_spec["mcpu"] == "sapphirerapids"
    two_cpus = DevicePair.parse('{"cpu": {"kind": "llvm"}, "gpu": {"kind": "llvm"}}')
    assert [v.vdevice_id for v in two_cpus.vdevices] == [1, 0]


def test_a_host_llvm_target_gets_the_hosts_cpu_and_a_cross_target_keeps_its_own():
    """Without mcpu LLVM emits generic x86-64 code (2.9x slower on ResNet-18 on a Zen 5)."""
    host = tvm.target.codegen.llvm_get_system_cpu()
    pair = DevicePair.parse('{"cpu": {"kind": "llvm", "num-cores": 2}, "gpu": {"kind": "llvm"}}')
    assert pair.cpu_spec == {"kind": "llvm", "num-cores": 2, "mcpu": host}
    assert pair.gpu_spec["mcpu"] == host
    assert pair.cpu_target.attrs["mcpu"] == host
    cross = DevicePair.parse('{"cpu": {"kind": "llvm", "mtriple": "aarch64-linux-android"}, '
                             '"gpu": {"kind": "opencl"}}')
    assert "mcpu" not in cross.cpu_spec
    mine = DevicePair.parse('{"cpu": {"kind": "llvm", "mcpu": "skylake"}, "gpu": {"kind": "llvm"}}')
    assert mine.cpu_spec["mcpu"] == "skylake"
    for name in ("cpu-pair", "auto"):  # the presets that build for this host
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert DevicePair.preset(name).cpu_spec["mcpu"] == host


@pytest.mark.parametrize("text, message", [
    ("{not json", "neither a preset name nor valid JSON"),
    ('{"cpu": {"kind": "llvm"}}', 'needs "cpu" and "gpu"'),
    ('{"cpu": {"kind": "llvm"}, "gpu": {"kind": "tpu"}}', "bad gpu target"),
])
def test_parse_rejects_bad_pairs(text, message):
    with pytest.raises(ValueError, match=message):
        DevicePair.parse(text)


def test_a_pair_carries_its_gpus_sm_count_through_json():
    text = ('{"cpu": {"kind": "llvm", "mcpu": "znver5"}, "gpu": {"kind": "cuda", '
            '"arch": "sm_90"}, "gpu_sms": 8}')
    pair = DevicePair.parse(text)
    assert pair.gpu_sms == 8 and DevicePair.from_json(pair.to_json()) == pair
    assert "gpu_sms" not in DevicePair.preset("cpu-pair").to_json()  # none: the arch's count
    with pytest.raises(ValueError, match="gpu_sms"):
        DevicePair.parse(text.replace('"gpu_sms": 8', '"gpu_sms": 0'))
