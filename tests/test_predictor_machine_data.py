"""Machine facts are data: caches, SMT, TLB reach, the GPU's per-SM limits and LLVM's codegen
facts are ``Machine`` fields, detected where the samples were profiled, stored by name in the
predictor file and taken from there; no module holds one machine's numbers. Ties name terms,
not columns; a predictor warns (or refuses) for another pair."""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from codl_tvm.predictor import (
    DATA_DIR,
    OpSpec,
    PairMismatchError,
    PairMismatchWarning,
    blocking,
    load,
    make,
    train,
)
from codl_tvm.predictor import ties as T
from codl_tvm.predictor.base import sub_spec
from codl_tvm.predictor.cpu_stream_terms import _l2s_bytes
from codl_tvm.predictor.machine import (
    FACTS,
    MachineFactWarning,
    load_machine,
    machine_from_facts,
    machine_json,
    reference,
)
from codl_tvm.predictor.opspec import SHARING_KINDS
from codl_tvm.profiler import machine_facts, read_samples
from codl_tvm.tiling import KernelVariants

SHIPPED = DATA_DIR / "predictor-x86-cuda.json"
SAMPLES = DATA_DIR / "samples-x86-cuda-h100.csv"
FACTS_DETECTED = {"cpu_l1_bytes": 32 << 10, "cpu_l2_bytes": 1 << 20, "cpu_l3_bytes": 32 << 20,
                  "cpu_smt": 1, "cpu_stlb_entries": 1536, "gpu_l2_bytes": 40 << 20,
                  "cpu_model": "some CPU", "gpu_sms": 132, "gpu_sm_threads": 1536,
                  "gpu_sm_blocks": 16, "eltwise_unroll_add": 30,
                  "pad_gather_identity_w": [9, 20]}  # fmt: skip
# the detected L3 is not taken: a KVM guest's sysfs reports a synthetic one
AS_MACHINE = {"cpu_l1_bytes": 32 << 10, "cpu_l2_bytes_per_core": 1 << 20,
              "cpu_smt": 1, "cpu_stlb_entries": 1536, "l2_bytes": 40 << 20,
              "gpu_sm_threads": 1536, "gpu_sm_blocks": 16, "eltwise_unroll_add": 30,
              "pad_gather_identity_w": (9, 20)}  # fmt: skip


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return read_samples(SAMPLES)


def test_the_shipped_file_names_every_fact_and_is_the_reference():
    stored = json.loads(SHIPPED.read_text())["model"]["machine"]
    assert set(FACTS) <= set(stored)
    assert load(SHIPPED).machine_ == dataclasses.replace(reference(), variants=reference().variants)
    assert machine_json(reference()) == stored


def test_a_file_of_the_current_format_must_name_every_fact():
    doc = machine_json(reference())
    del doc["gpu_sm_threads"]
    with pytest.raises(ValueError, match="gpu_sm_threads"):
        load_machine(doc)
    # files before format 5 were all trained on the reference machine: it fills their facts
    # (their kernel variants are the file's, not the machine's: ``KernelVariants.from_stored``)
    facts = dataclasses.replace(reference(), variants=KernelVariants())
    assert load_machine({"cores": 8, "lanes": 16, "sms": 132}, 4) == dataclasses.replace(
        facts, cores=8, cpu_stream_bytes=0)
    assert load_machine([16, 16, 132, 50 << 20, 0], 2) == dataclasses.replace(
        facts, cpu_stream_bytes=0)
    with pytest.raises(ValueError, match="unknown machine facts"):
        load_machine({**doc, "cpu_l4_bytes": 1})
    with pytest.raises(ValueError, match="pad_gather_crop_w"):
        load_machine({**machine_json(reference()), "pad_gather_crop_w": "2-15"})


def test_facts_fill_the_machine_and_change_the_terms():
    ref = reference()
    m = machine_from_facts(ref, FACTS_DETECTED)
    assert {k: getattr(m, k) for k in AS_MACHINE} == AS_MACHINE
    assert machine_from_facts(ref, {"cpu_l3_bytes": 0, "cpu_smt": True}) == ref
    assert _l2s_bytes(m) == 16 * (1 << 20) and _l2s_bytes(ref) == 8 * (2 << 20)
    assert m.cpu_l3_bytes == ref.cpu_l3_bytes
    # a machine whose L3 is smaller streams a pass the reference machine's keeps
    elt = OpSpec("elementwise", 224, 224, 250, 250, 1, 1)  # 2 x 50 MB: past 32 MB, not 105
    small = dataclasses.replace(m, cpu_l3_bytes=32 << 20)
    assert blocking.terms("cpu", elt, small)[-1] > 0 == blocking.terms("cpu", elt, ref)[-1]
    # a 40-wide bias-add row is gathered on the reference's LLVM target, not on one that
    # unrolls rows up to 30 columns only
    row = OpSpec("elementwise", 40, 40, 64, 64, 1, 1)
    assert blocking.cpu_eltwise(row, ref)[1] > 0
    assert blocking.cpu_eltwise(row, dataclasses.replace(
        ref, eltwise_unroll_add=30, eltwise_unroll_relu=30))[1] == 0
    # an SM of 1024 threads runs half the waves of DLight's 1024-thread blocks at once
    pool = OpSpec("pool_max", 112, 112, 64, 64, 3, 3, 2, 2)
    half = dataclasses.replace(ref, gpu_sm_threads=1024)
    assert blocking.gpu_pool(pool, half)[0] == 2 * blocking.gpu_pool(pool, ref)[0]


def test_training_takes_the_facts_beside_the_samples_and_the_file_keeps_them(rows, tmp_path):
    samples = tmp_path / "s.csv"
    shutil.copy(SAMPLES, samples)
    machine_facts.write(samples, FACTS_DETECTED)
    with pytest.warns(MachineFactWarning, match="max_threads"):
        pred = train(read_samples(samples), kind="codl", output=tmp_path / "p.json",
                     machine=machine_facts.beside(samples), source=samples, cpu_stream_bytes=0)
    assert {k: getattr(pred.machine_, k) for k in AS_MACHINE} == AS_MACHINE
    stored = json.loads((tmp_path / "p.json").read_text())["model"]["machine"]
    assert stored["eltwise_unroll_add"] == 30 and stored["pad_gather_identity_w"] == [9, 20]
    back = load(tmp_path / "p.json")
    assert back.machine_ == pred.machine_
    comp = [r for r in rows[::5] if r["op"] not in SHARING_KINDS]
    assert back.predict(comp) == pytest.approx(pred.predict(comp), rel=1e-2)
    with pytest.warns(MachineFactWarning, match="cpu_l1_bytes.*eltwise_unroll_add"):
        plain = train(rows, kind="codl", cpu_stream_bytes=0)  # rows: no facts
    assert plain.machine_ == dataclasses.replace(pred.machine_, **{
        f: getattr(reference(), f) for f in AS_MACHINE})


def test_calibration_takes_the_targets_caches(rows):
    pred = load(SHIPPED)
    comp = [r for r in rows if r["op"] not in SHARING_KINDS][:200]
    pred.calibrate(comp, machine={"cpu_l2_bytes": 1 << 20, "gpu_sms": 132})
    assert pred.machine_.cpu_l2_bytes_per_core == 1 << 20 and pred.machine_.run_sms == 0


# ---- ties by name ------------------------------------------------------------------------
SPECS = [OpSpec("conv2d", 13, 13, 64, 64, 1, 1), OpSpec("conv2d", 28, 28, 32, 48, 3, 3,
         pad=(1, 1, 1, 1)), OpSpec("conv2d", 14, 14, 64, 96, 1, 1, 2, 2),
         OpSpec("elementwise", 28, 28, 64, 64, 1, 1),
         OpSpec("pool_max", 27, 27, 64, 64, 3, 3, 2, 2)]  # fmt: skip
KIND_OF = {"parallel-loops": "elementwise", "elementwise": "elementwise", "pool": "pool_max"}


def runs(algo: str, s: OpSpec) -> bool:
    """Whether a kernel of ``algo`` can run ``s`` (Winograd: 3x3 stride 1 only)."""
    wino = algo.endswith("winograd-2x2-3x3")
    return s.kind == KIND_OF.get(algo, "conv2d") and (not wino or (s.KH, s.SH) == (3, 1))


def test_every_named_term_list_matches_its_terms():
    for (fam, algo), names in blocking.TERM_NAMES.items():
        assert len(set(names)) == len(names) and names[0] == "t0"
        tried = [s for s in SPECS if runs(algo, s)]
        assert tried, algo
        for s in tried:
            assert len(blocking.terms(fam, s, reference(), algo)) == len(names), algo
    for ties in (*T.TIED_UNITS.values(), *T.TIED_VARIANT_UNITS.values()):
        for tie in ties:  # every tie names a term of its model and a source the unit reads
            assert any(tie.term in n for n in blocking.TERM_NAMES.values())


def test_reordering_a_term_list_with_its_names_keeps_the_ties(monkeypatch):
    """Reverse every named term list (names and the models' units alike): each tie still
    sets the same term to the same unit."""
    pred = load(SHIPPED)
    family = pred.family_
    keys = [k for k in pred.t_ if T.ties_of(k, family)]

    def by_name(k: str, cols: dict[int, float], names: dict) -> dict[str, float]:
        return {names[("cpu", k.split("/")[2])][c]: u for c, u in cols.items()}

    before = {k: by_name(k, T.tied_units(k, family, pred.t_), blocking.TERM_NAMES) for k in keys}
    assert all(before.values())
    perm = {key: tuple(reversed(names)) for key, names in blocking.TERM_NAMES.items()}
    models = {}
    for k, units in pred.t_.items():
        if ("cpu", k.split("/")[2]) in perm and k.startswith("cpu/"):
            assert len(units) == len(perm[("cpu", k.split("/")[2])])  # the file keeps them all
            units = list(reversed(units))
        models[k] = units
    monkeypatch.setattr(blocking, "TERM_NAMES", perm)
    monkeypatch.setattr(T, "TERM_NAMES", perm)
    after = {k: by_name(k, T.tied_units(k, family, models), perm) for k in keys}
    assert after == before


# ---- the pair a predictor was made for ---------------------------------------------------
def test_a_predictor_warns_once_naming_both_pairs_or_refuses():
    pred = load(SHIPPED)
    x86 = {"name": "x86-cuda", "cpu": {"kind": "llvm", "num-cores": 16},
           "gpu": {"kind": "cuda", "arch": "sm_90"}}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pred.check_pair(x86) is pred and pred.check_pair("x86-cuda") is pred
    cpu_pair = {"name": "cpu-pair", "cpu": {"kind": "llvm", "num-cores": 2},
                "gpu": {"kind": "llvm", "num-cores": 2}}  # fmt: skip
    with pytest.warns(PairMismatchWarning) as got:
        pred.check_pair(cpu_pair)
    assert len(got) == 1
    text = str(got[0].message)
    assert "'x86-cuda'" in text and "'cpu-pair'" in text and "16 cores" in text
    other = {**x86, "cpu": {"kind": "llvm", "num-cores": 8},
             "gpu": {"kind": "cuda", "arch": "sm_80"}}
    assert len(pred.pair_mismatch(other)) == 2  # the same name, another machine
    with pytest.raises(PairMismatchError, match="108"):
        pred.check_pair(other, strict=True)


def test_check_pair_takes_a_device_pair():
    from codl_tvm import DevicePair

    pred = load(SHIPPED)
    assert pred.pair_mismatch(DevicePair.preset("x86-cuda", arch="sm_90", num_cores=16)) == []
    assert pred.pair_mismatch(DevicePair.preset("cpu-pair", num_cores=2))
    baseline = make("flops").fit([r for r in read_samples(SAMPLES)][:400])
    assert baseline.pair_mismatch("x86-cuda") == [] and baseline.pair_mismatch("cpu-pair")


def test_the_shipped_predictor_predicts_as_before(rows):
    """Every 10th compute row of the shipped samples: the kernel the mirror picks and its
    predicted time, as computed before the dispatch rows, machine facts and ties were data."""
    want = json.loads((Path(__file__).parent / "data" / "shipped-predictions-x86-cuda.json"
                       ).read_text())  # fmt: skip
    pred = load(SHIPPED)
    comp = [r for r in rows if r["op"] not in SHARING_KINDS][::10]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # out-of-range shapes of the samples
        got = [pred.kernel_us(r["role"], sub_spec(r)) for r in comp]
        algos = [pred.algorithm(r["role"], sub_spec(r)) for r in comp]
    assert algos == want["algorithm"]
    np.testing.assert_allclose(got, want["kernel_us"], rtol=1e-12)
