"""One dispatch table, and kernel variants as compile options (issue #30, item 3).

- the predictor's dispatch mirror derives its rows from the table the schedules use
  (``tiling.dispatch_table.TABLE``, ``schedules.dispatch.RULES``): removing a row changes the
  predictor's kernel choice, a row without a mirror (or a reason to have none) is an error;
- ``codl_tvm.compile(..., variants=KernelVariants(...))`` builds the variants and records
  them in the artifact manifest; a predictor records the variants its samples were built with;
- the retired environment switches (``CODL_GPU_CONV``, ``CODL_CPU_GEMM``,
  ``CODL_GPU_WINOGRAD``) change no kernel and no prediction.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from helpers import conv, single_function
from tvm import tirx

import codl_tvm
from codl_tvm import Plan, executable, tiling
from codl_tvm.predictor import DATA_DIR, OpSpec, load, mirror
from codl_tvm.predictor.base import sub_spec
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.mirror import kernel
from codl_tvm.predictor.opspec import SHARING_KINDS
from codl_tvm.profiler import read_samples
from codl_tvm.schedules import blocking_of, dispatch
from codl_tvm.tiling import KernelVariants
from codl_tvm.tiling.dispatch_table import TABLE, TableRow

OLD_SWITCHES = {"CODL_GPU_CONV": "tiled-64", "CODL_CPU_GEMM": "always",
                "CODL_GPU_WINOGRAD": "0"}  # fmt: skip
K1S2 = OpSpec("conv2d", 26, 26, 256, 256, 1, 1, 2, 2)  # direct by default, GEMM with "always"
K1 = OpSpec("conv2d", 26, 26, 256, 256, 1, 1)  # the 1x1 GEMM
K3 = OpSpec("conv2d", 13, 13, 256, 512, 3, 3, pad=(1, 1, 1, 1))  # GPU Winograd


# ---- one table ---------------------------------------------------------------------------
def test_schedules_and_predictor_share_one_table():
    assert [(r.name, r.family, r.ops) for r in dispatch.RULES] == list(TABLE)
    mirrored = [r.name for r in TABLE if r.name not in mirror.NOT_MIRRORED]
    assert sorted(mirrored) == sorted(mirror.MIRRORS)  # no mirror of a rule that is gone
    for fam in ("cpu", "gpu"):  # the mirror's rows: the table's, in its order
        names = [r.name for r in TABLE if r.family == fam and r.name in mirror.MIRRORS]
        assert mirror.ROWS[fam] == tuple(mirror.MIRRORS[n] for n in names)


def test_removing_a_row_changes_the_predictors_choice(monkeypatch):
    assert kernel("cpu", K1, reference()).algorithm == "gemm-1x1"
    assert kernel("gpu", K3, reference()).algorithm == "gpu-winograd-2x2-3x3"
    gone = {"cpu-conv2d-gemm-1x1", "gpu-conv2d-winograd"}
    table = tuple(r for r in TABLE if r.name not in gone)
    monkeypatch.setattr(mirror, "_BY_KIND", mirror.by_kind(mirror.rows_of(table)))
    assert kernel("cpu", K1, reference()).algorithm == "direct-nchwc"
    assert kernel("gpu", K3, reference()).algorithm.startswith("gpu-conv-tiled")
    assert [r.name for r in dispatch.build_rules(table)] == [r.name for r in table]


def test_a_new_row_needs_a_mirror_and_a_schedule():
    table = (*TABLE, TableRow("gpu-conv2d-new", "gpu", ("conv2d",)))
    with pytest.raises(ValueError, match="gpu-conv2d-new.*no mirror"):
        mirror.rows_of(table)
    with pytest.raises(ValueError, match="without a schedule.*gpu-conv2d-new"):
        dispatch.build_rules(table)


# ---- variants as options -----------------------------------------------------------------
def test_variants_parse_and_round_trip():
    v = KernelVariants.parse(["gpu_conv=tiled-64", "cpu-gemm=always", "gpu_winograd=off",
                              "cpu_matmul=streamed", "gpu_matmul=dlight", "gpu_prefetch=off",
                              "cpu_prepack=off", "cpu_fast_math=off",
                              "cpu_depthwise_blocks=off", "cpu_gemm_rows=off",
                              "cpu_winograd_panels=off", "cpu_gemm_fit=off",
                              "cpu_matmul_rows=off", "cpu_gemm_in_place=off",
                              "cpu_depthwise_phases=off", "cpu_winograd_64x64=off",
                              "cpu_even_tiles=off", "cpu_vector_tails=off",
                              "cpu_gemv_panels=off"])
    assert v == KernelVariants("tiled-64", "always", False, "streamed", "dlight", False, False,
                               False, False, False, False, False, False, False, False, False,
                               False, False, False)
    assert KernelVariants.from_json(json.loads(json.dumps(v.to_json()))) == v
    assert KernelVariants.from_json(None) == KernelVariants() and KernelVariants().is_default
    assert v.describe() == ("gpu_conv=tiled-64,cpu_gemm=always,gpu_winograd=off,"
                            "cpu_matmul=streamed,gpu_matmul=dlight,gpu_prefetch=off,"
                            "cpu_prepack=off,cpu_fast_math=off,cpu_depthwise_blocks=off,"
                            "cpu_gemm_rows=off,cpu_winograd_panels=off,cpu_gemm_fit=off,"
                            "cpu_matmul_rows=off,cpu_gemm_in_place=off,"
                            "cpu_depthwise_phases=off,cpu_winograd_64x64=off,"
                            "cpu_even_tiles=off,cpu_vector_tails=off,cpu_gemv_panels=off")
    for bad in (["gpu_conv=nope"], ["cpu_gemm=sometimes"], ["gpu_winograd=maybe"], ["x=1"],
                ["gpu_conv"], ["cpu_matmul=tiled"], ["gpu_matmul=packed"], ["gpu_prefetch=maybe"],
                ["cpu_prepack=later"], ["cpu_fast_math=approx"], ["cpu_depthwise_blocks=2"],
                ["cpu_gemm_rows=wide"], ["cpu_winograd_panels=2"], ["cpu_gemm_fit=tight"],
                ["cpu_matmul_rows=6"], ["cpu_gemm_in_place=maybe"],
                ["cpu_depthwise_phases=3"], ["cpu_winograd_64x64=128"],
                ["cpu_even_tiles=8"], ["cpu_vector_tails=16"], ["cpu_gemv_panels=64"]):
        with pytest.raises(ValueError):
            KernelVariants.parse(bad)
    with pytest.raises(ValueError, match="unknown kernel variants"):
        KernelVariants.from_json({"gpu_conv": "tiled", "other": 1})


def test_use_variants_nests():
    assert tiling.current_variants() == KernelVariants()
    with tiling.use_variants(KernelVariants(cpu_gemm="always")):
        with tiling.use_variant("dlight"):
            assert tiling.current_variants() == KernelVariants("dlight", "always", True)
        assert tiling.current_variant() == "tiled"
    assert tiling.current_variants() == KernelVariants()


def _k1s2_model():
    rng = np.random.default_rng(0)
    return codl_tvm.load_model(single_function(
        (1, 16, 12, 12), lambda bb, x: conv(bb, x, rng, 16, 1, stride=2)))


def _algorithms(exe) -> set[str]:
    return {b.algorithm for f in exe.mod.functions.values()
            if isinstance(f, tirx.PrimFunc) and (b := blocking_of(f)) is not None}  # fmt: skip


def test_compile_builds_the_variants_and_records_them(monkeypatch):
    mod = _k1s2_model()
    pair = codl_tvm.DevicePair.preset("cpu-pair")
    plain = codl_tvm.compile(mod, pair, Plan.single(mod, "cpu"))
    assert "direct-nchwc" in _algorithms(plain)
    assert plain.manifest["kernel_variants"] == KernelVariants().to_json()
    always = KernelVariants(cpu_gemm="always", gpu_winograd=False)
    exe = codl_tvm.compile(mod, pair, Plan.single(mod, "cpu"), variants=always)
    assert "gemm-1x1" in _algorithms(exe)
    assert exe.manifest["kernel_variants"] == always.to_json()
    assert tiling.current_variants() == KernelVariants()  # only while compiling
    for name, value in OLD_SWITCHES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(executable, "_warned_switches", set())  # once per process
    with pytest.warns(UserWarning, match="no longer change kernels"):
        again = codl_tvm.compile(mod, pair, Plan.single(mod, "cpu"))
    assert "direct-nchwc" in _algorithms(again)
    assert again.manifest["kernel_variants"] == KernelVariants().to_json()


# ---- the retired environment switches ----------------------------------------------------
def test_old_switches_change_no_kernel_nor_prediction(monkeypatch):
    pred = load(DATA_DIR / "predictor-x86-cuda.json")
    rows = [r for r in read_samples(DATA_DIR / "samples-x86-cuda-h100.csv")[::7]
            if r["op"] not in SHARING_KINDS]

    def now():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            algos = [pred.algorithm(r["role"], sub_spec(r)) for r in rows]
            return algos, [pred.kernel_us(r["role"], sub_spec(r)) for r in rows]

    before = now()
    for name, value in OLD_SWITCHES.items():
        monkeypatch.setenv(name, value)
    assert tiling.current_variants() == KernelVariants()
    assert not tiling.gemm_wins(mirror.conv_shape(K1S2), reference())
    assert tiling.gpu_winograd_wins(mirror.conv_shape(K3))
    assert now() == before


# ---- the predictor records its variants ------------------------------------------------
def test_predictor_records_the_variants_of_its_samples(tmp_path):
    rows = read_samples(DATA_DIR / "samples-x86-cuda-h100.csv")
    always = KernelVariants(cpu_gemm="always")
    pred = codl_tvm.predictor.make("codl", cpu_stream_bytes=0).fit(
        rows, machine={"kernel_variants": always.to_json()})
    assert pred.machine_.variants == always
    assert pred.algorithm("cpu", K1S2) == "gemm-1x1"
    pred.save(tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    # what is not the default, and the fields files from before them lack (and mean off)
    assert doc["model"]["variants"] == {"cpu_gemm": "always", "cpu_prepack": True,
                                        "cpu_depthwise_blocks": True, "cpu_gemm_rows": True,
                                        "cpu_winograd_panels": True, "cpu_gemm_fit": True,
                                        "cpu_matmul_rows": True, "cpu_gemm_in_place": True,
                                        "cpu_depthwise_phases": True,
                                        "cpu_winograd_64x64": True,
                                        "cpu_even_tiles": True,
                                        "cpu_vector_tails": True,
                                        "cpu_gemv_panels": True}
    back = load(tmp_path / "p.json")
    assert back.machine_.variants == always and back.algorithm("cpu", K1S2) == "gemm-1x1"
    shipped = load(DATA_DIR / "predictor-x86-cuda.json")  # no "variants": those of its day
    assert shipped.machine_.variants == KernelVariants(cpu_prepack=False,
                                                       cpu_depthwise_blocks=False,
                                                       cpu_gemm_rows=False,
                                                       cpu_winograd_panels=False,
                                                       cpu_gemm_fit=False,
                                                       cpu_matmul_rows=False,
                                                       cpu_gemm_in_place=False,
                                                       cpu_depthwise_phases=False,
                                                       cpu_winograd_64x64=False,
                                                       cpu_even_tiles=False,
                                                       cpu_vector_tails=False,
                                                       cpu_gemv_panels=False)
    assert shipped.algorithm("cpu", K1S2) == "direct-nchwc"


def test_the_compile_command_takes_variants_and_refuses_a_bad_one(tmp_path, capsys):
    from codl_tvm.cli import main

    out = tmp_path / "art"
    assert main(["compile", "tiny-cnn", "--pair", "cpu-pair", "-o", str(out),
                 "--kernel-variant", "cpu_gemm=always"]) == 0  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kernel_variants"]["cpu_gemm"] == "always"
    capsys.readouterr()
    bad = tmp_path / "bad"
    assert main(["compile", "tiny-cnn", "--pair", "cpu-pair", "-o", str(bad),
                 "--kernel-variant", "gpu_conv=nope"]) == 1  # fmt: skip
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "nope" in line and not bad.exists()
