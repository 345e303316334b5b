"""Coverage by construction: a profile's random draw gives every kernel model the pair's
dispatch can run at least ``MIN_PER_MODEL`` jobs, more where real networks use it more."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


@pytest.mark.parametrize("preset", ["cpu-pair", "x86-cuda"])
def test_every_model_is_fitted_on_enough_distinct_ops(preset, x86_cuda):
    # the jobs of one op (its shares and dims) move a model's terms together: a quick profile
    # fitted the CPU's 1x1 GEMM on 4 ops and priced blind 1x1 convs 1.7x too long
    pair = x86_cuda if preset == "x86-cuda" else DevicePair.preset("cpu-pair", num_cores=2)
    m = coverage.pair_machine(pair)
    fams = {"cpu": "cpu", "gpu": "gpu" if preset == "x86-cuda" else "cpu"}
    ops: dict[str, set] = {}
    for job in make_jobs(quick=True, pair=pair):
        key = coverage.model_key(job, fams, m)
        if key is not None:
            ops.setdefault(key, set()).add(job.spec)
    thin = {k: len(v) for k, v in ops.items() if len(v) < coverage.MIN_OPS_PER_MODEL}
    assert not thin, thin


def _sized(flops: list[int]) -> list[space.Job]:
    return [space.Job("cpu", "to_cpu", shape=(n, 1, 1)) for n in sorted(flops)]


@given(st.lists(st.integers(1, 10**9), min_size=3, max_size=300, unique=True),
       st.integers(2, 12))  # fmt: skip
def test_spread_orders_the_jobs_over_their_sizes(flops, k):
    jobs = _sized(flops)
    cap = sorted(flops)[len(flops) * 3 // 4]
    order = coverage.spread(jobs, cap)
    assert sorted(j.flops for j in order) == sorted(flops)  # a reordering, nothing lost
    inside = [j.flops for j in order if j.flops <= cap]
    assert [j.flops for j in order][: len(inside)] == inside  # the jobs past the cap last
    first = [math.log(f) for f in inside[:k]]
    logs = sorted(math.log(f) for f in inside)
    assert min(first) == logs[0] and max(first) == logs[-1]  # the range's ends come first
    # any first k leave no gap wider than the widest the sizes themselves force around it
    gaps = [b - a for a, b in zip(sorted(first), sorted(first)[1:])]
    widest_own = max((b - a for a, b in zip(logs, logs[1:])), default=0.0)
    span = logs[-1] - logs[0]
    assert max(gaps, default=0.0) <= 2 * span / (k - 1) + 2 * widest_own + 1e-9


def test_spread_of_few_jobs_is_cheapest_first():
    jobs = _sized([5, 3])
    assert [j.flops for j in coverage.spread(jobs, 10)] == [3, 5]


def test_no_random_tensor_is_larger_than_real_networks_largest(x86_cuda):
    # a 450 MB global pool and a 141 MB depthwise conv once tripled a quick profile's time
    cap = coverage.usage_max_bytes()
    assert 10 << 20 < cap < 100 << 20  # real activations: tens of MB (FST's 480x640x32)
    for quick in (True, False):
        specs = {j.spec for j in make_jobs(quick=quick, pair=x86_cuda) if j.spec is not None}
        assert max(max(s.in_bytes, s.out_bytes) for s in specs) <= cap
