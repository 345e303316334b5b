"""LLVM's codegen facts are detected by compiling probe kernels for the CPU target: on the
reference machine's target they are the facts its predictor file stores, and on a target
without gathers no gather rule fires."""

from __future__ import annotations

import dataclasses

import pytest

from codl_tvm.predictor.machine import FACT_GROUPS, NOT_DETECTED, machine_from_facts, reference
from codl_tvm.predictor.mirror import pad_gathered
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.profiler import codegen_facts

SPR = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16,
       "mtriple": "x86_64-linux-gnu"}  # fmt: skip
ARM = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"], "num-cores": 8}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CODL_TVM_CACHE", str(tmp_path))
    codegen_facts._cached.cache_clear()
    yield
    codegen_facts._cached.cache_clear()


@pytest.mark.slow
def test_the_reference_targets_facts_are_the_shipped_files(tmp_path):
    got = codegen_facts.detect(SPR)
    detected = [f for f in FACT_GROUPS["codegen"] if f not in NOT_DETECTED]
    assert sorted(got) == sorted(detected)
    assert {f: getattr(reference(), f) for f in detected} == got
    # kept per target: the second call reads the cache file instead of compiling
    path = codegen_facts.cache_path(codegen_facts.json.dumps(SPR, sort_keys=True))
    assert path.is_file() and path.parent.parent == tmp_path
    codegen_facts._cached.cache_clear()
    path.write_text(path.read_text().replace('"llvm_vector_floats": 8', '"llvm_vector_floats": 4'))
    assert codegen_facts.detect(SPR)["llvm_vector_floats"] == 4


@pytest.mark.slow
def test_a_target_without_gathers_fires_no_gather_rule():
    got = codegen_facts.detect(ARM)
    assert got["pad_gather_identity_w"] == (0, 0) and got["sampled_gather_one_row_w"] == (0, 0)
    assert got["llvm_vector_floats"] == 4
    m = dataclasses.replace(machine_from_facts(reference(), got), lanes=4)
    for w in range(3, 64):
        for k, stride in ((3, 1), (3, 2), (1, 2)):
            s = OpSpec("conv2d", w, w, 16, 32, k, k, stride, stride)
            assert not pad_gathered(s, s.H, s.W, m)
