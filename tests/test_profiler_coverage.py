"""Coverage by construction: a profile's random draw gives every kernel model the pair's
dispatch can run at least ``MIN_PER_MODEL`` jobs, more where real networks use it more."""

from __future__ import annotations

import math

import pytest

from codl_tvm import DevicePair
from codl_tvm.profiler import coverage, make_jobs, space


@pytest.fixture(scope="module")
def x86_cuda() -> DevicePair:
    return DevicePair.preset("x86-cuda", arch="sm_90", num_cores=16)


def _counts(jobs, pair):
    return coverage.coverage(jobs, pair, coverage.pair_machine(pair))


@pytest.mark.parametrize("preset", ["cpu-pair", "x86-cuda"])
def test_every_model_of_the_dispatch_gets_its_samples(preset, x86_cuda):
    pair = x86_cuda if preset == "x86-cuda" else DevicePair.preset("cpu-pair", num_cores=2)
    plain = _counts(make_jobs(quick=True), pair)
    covered = _counts(make_jobs(quick=True, pair=pair), pair)
    assert set(plain) <= set(covered)
    assert all(n >= coverage.MIN_PER_MODEL for n in covered.values()), covered
    # the quick draw alone has no CPU Winograd sub-op, though real 3x3 convs run it
    assert plain.get("cpu/conv2d/winograd-2x2-3x3", 0) == 0
    assert covered["cpu/conv2d/winograd-2x2-3x3"] >= coverage.MIN_PER_MODEL
    if preset == "x86-cuda":  # GPU kernels no CoDL-range draw reaches: global pools
        assert covered["gpu/pool_avg/global-reduction"] >= coverage.MIN_PER_MODEL


def test_models_real_networks_use_more_get_more(x86_cuda):
    m = coverage.pair_machine(x86_cuda)
    usage = coverage.usage_shares({"cpu": "cpu", "gpu": "gpu"}, m, space.QUICK_GRID)
    top = max(usage, key=usage.get)
    jobs = make_jobs(quick=True)
    n = sum(_counts(jobs, x86_cuda).values())
    assert _counts(make_jobs(quick=True, pair=x86_cuda), x86_cuda)[top] >= math.ceil(
        usage[top] * coverage.USAGE_SHARE * n)


def test_the_draw_is_deterministic_and_keeps_the_profiles_jobs(x86_cuda):
    a, b = make_jobs(quick=True, pair=x86_cuda), make_jobs(quick=True, pair=x86_cuda)
    assert [j.key("") for j in a] == [j.key("") for j in b]  # a resumed profile finds its rows
    plain = make_jobs(quick=True)
    assert {j.key("") for j in plain} <= {j.key("") for j in a}
    assert len({j.key("") for j in a}) == len(a)


def test_workloads_and_restricted_kinds_are_measured_as_asked(tmp_path, x86_cuda):
    wl = tmp_path / "w.csv"
    wl.write_text("CNN,IH,IW,IC,OC,KH,KW,SH,SW,PT,PH,PW,DH,DW\nX,28,28,64,64,3,3,1,1,1,0,0,1,1\n")
    assert len(make_jobs(workloads=[wl], pair=x86_cuda, sharing=False)) == len(
        make_jobs(workloads=[wl], sharing=False))
    kinds = ["pool_max"]
    assert len(make_jobs(quick=True, kinds=kinds, pair=x86_cuda)) == len(
        make_jobs(quick=True, kinds=kinds))


def test_modules_are_measured_in_chunks_that_bound_the_tensors_held(x86_cuda):
    """A VM keeps the last inputs and outputs it ran with, so a profile loads and measures a
    chunk of modules at a time; each chunk mixes the roles, as the rounds interleave them."""
    from codl_tvm.profiler.measure import chunk_batches, job_bytes, plan_batches

    batches = plan_batches(make_jobs(quick=False, n_specs=60), batch_size=24)
    budget = 256 << 20
    chunks = chunk_batches(batches, budget)
    assert sorted(n for c in chunks for n in c) == list(range(len(batches)))
    for chunk in chunks:
        sizes = [sum(job_bytes(j) for j in batches[n][1]) for n in chunk]
        assert sum(sizes) <= budget or len(chunk) == 1
    assert {batches[n][0] for n in chunks[0]} == {None, "gpu", "cpu"}
    assert len(chunks) > 1
