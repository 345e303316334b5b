"""Candidate plans (``codl_tvm.planner.candidates``): the planner also plans for a CPU slower
or faster than its costs say, the plan carries the distinct results, a guarded build holds
them, and the runtime runs the fastest of all where it loads the artifact."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import conv, single_function
from tvm.relax import op as rop

import codl_tvm
from codl_tvm import Plan, runtime
from codl_tvm.executable import guard_plans
from codl_tvm.plan import PlanError
from codl_tvm.planner.api import make_plan
from codl_tvm.planner.candidates import ScaledCosts, coarse_label, label, with_candidates
from codl_tvm.planner.costs import AnalyticCosts, OverlappedCosts
from codl_tvm.planner.opgraph import build_graph
from codl_tvm.predictor.opspec import OpSpec

PAIR = codl_tvm.DevicePair.preset("cpu-pair")
# a GPU 4x the CPU, copies beside kernels: the codl search splits the convs
COSTS = OverlappedCosts(AnalyticCosts(cpu_gflops=50, gpu_gflops=200, sync_us=5, copy_gbps=20),
                        cpu_chunks=1)


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)

    def body(bb, x):
        x = conv(bb, x, rng, 32, 3, padding=(1, 1, 1, 1), bias=True)
        x = bb.emit(rop.nn.relu(x))
        return conv(bb, x, rng, 32, 3, padding=(1, 1, 1, 1))

    return codl_tvm.load_model(single_function((1, 16, 64, 64), body))


def test_scaled_costs_lengthen_the_cpus_kernels_only():
    sub = OpSpec("conv2d", 32, 32, 16, 32, 3, 3, pad=(1, 1, 1, 1))
    scaled = ScaledCosts(COSTS, 1.5)
    assert scaled.kernel_us("cpu", sub) == pytest.approx(1.5 * COSTS.kernel_us("cpu", sub))
    assert scaled.kernel_us("gpu", sub) == COSTS.kernel_us("gpu", sub)
    assert scaled.sharing_us("to_cpu", "cpu", 1e6) == COSTS.sharing_us("to_cpu", "cpu", 1e6)
    assert (scaled.overlap, scaled.cpu_chunks, scaled.concurrent) == (True, 1, True)
    in_model = scaled.in_model(10**8)
    assert isinstance(in_model, ScaledCosts) and in_model.cpu_scale == 1.5
    with pytest.raises(ValueError, match="positive"):
        ScaledCosts(COSTS, 0)


def test_a_slower_cpu_gets_fewer_rows_and_each_candidate_is_distinct(model):
    mg = build_graph(model)
    result = make_plan(mg, "codl", COSTS)
    assert result.plan.single_device() is None
    found = with_candidates(result, mg, COSTS, cpu_scales=(1.0, 2.0, 2.0, 1e4), coarse_step=None)
    # 1.0 is the plan itself, the second 2.0 the same candidate, 1e4 plans GPU-only
    assert list(found) == [label(2.0)] == list(result.plan.candidates)
    cand = result.plan.candidates["cpu-x2"]

    def cpu_share(plan):
        return [1 - p.ratio for p in plan.ops.values() if p.place == "split"]

    assert sum(cpu_share(cand)) < sum(cpu_share(result.plan))


def test_the_coarse_candidate_gives_the_cpu_at_least_a_quarter(model):
    # the predictor misjudges small parts (planner.candidates): one candidate plans with
    # the shares on the coarse grid, so the guard can measure fewer, larger splits
    mg = build_graph(model)
    costs = OverlappedCosts(AnalyticCosts(cpu_gflops=100, gpu_gflops=200, sync_us=5,
                                          copy_gbps=20), cpu_chunks=1)  # a GPU 2x the CPU
    result = make_plan(mg, "codl", costs)
    fine = [p.ratio for p in result.plan.ops.values() if p.place == "split"]
    assert any(round(r * 4) != r * 4 for r in fine)  # the plan itself is off the grid
    found = with_candidates(result, mg, costs, cpu_scales=(), coarse_step=0.25)
    coarse = result.plan.candidates[coarse_label(0.25)]
    assert list(found) == ["step-0.25"]
    assert all(p.ratio in (0.25, 0.5, 0.75) for p in coarse.ops.values() if p.place == "split")
    # a search on that grid already has no coarse candidate of its own
    on_grid = make_plan(mg, "oracle", costs)
    assert with_candidates(on_grid, mg, costs, "oracle", cpu_scales=()) == {}


def test_candidates_round_trip_and_bad_ones_are_named(model):
    plan = Plan.uniform(model, "H", 0.5)
    plan.candidates["cpu-x1.25"] = Plan.uniform(model, "H", 0.75)
    doc = json.loads(json.dumps(plan.to_json()))
    assert Plan.from_json(doc) == plan
    assert "candidates" not in Plan.uniform(model, "H", 0.5).to_json()  # old files unchanged
    bad = dict(doc, candidates={"Bad Label": doc["candidates"]["cpu-x1.25"]})
    with pytest.raises(PlanError, match="label 'Bad Label'"):
        Plan.from_json(bad)
    nested = dict(doc, candidates={"a": doc})
    with pytest.raises(PlanError, match="candidate 'a' has candidates of its own"):
        Plan.from_json(nested)
    plan.candidates["other"] = Plan(ops={"conv2d_9": plan.ops["conv2d_0"]})
    with pytest.raises(PlanError, match="candidate 'other': plan names unknown op"):
        plan.validate(model)


def test_what_a_guarded_build_holds(model):
    split = Plan.uniform(model, "H", 0.5)
    split.candidates["cpu-x2"] = Plan.uniform(model, "OC", 0.75)
    assert list(guard_plans(model, split)) == ["plan-cpu-x2", "gpu-only", "cpu-only"]
    # a plan on the GPU whose candidate splits: the candidate and the CPU alone
    gpu = Plan.single(model, "gpu")
    gpu.candidates["cpu-x0.8"] = Plan.uniform(model, "H", 0.5)
    assert list(guard_plans(model, gpu)) == ["plan-cpu-x0.8", "cpu-only"]
    assert guard_plans(model, Plan.single(model, "gpu")) == {}


def test_the_runtime_runs_the_fastest_of_the_plan_its_candidates_and_the_singles(model,
                                                                                 tmp_path):
    plan = Plan.uniform(model, "H", 0.5)
    plan.candidates["cpu-x2"] = Plan.uniform(model, "OC", 0.75)
    exe = codl_tvm.compile(model, PAIR, plan, guard=True)
    cand = exe.alternatives["plan-cpu-x2"]
    assert cand.manifest["plan"] == plan.candidates["cpu-x2"].to_json()
    runner = runtime.load(exe.export(tmp_path / "art"))
    ms = runner.choice["latency_ms"]
    assert set(ms) == {"plan", "plan-cpu-x2", "gpu-only", "cpu-only"}
    assert ms[runner.choice["chosen"]] == min(ms.values())
    x = exe.random_inputs(seed=1)
    np.testing.assert_allclose(runner.run(x)[0], exe.run(x)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cand.run(x)[0], exe.run(x)[0], rtol=1e-5, atol=1e-6)


def test_plan_command_writes_the_candidates_and_names_them(tmp_path, capsys):
    """``codl-tvm plan --candidates`` on a predictor whose CPU is 20x its trained speed (so
    the x86-cuda pair splits): the plan file holds each candidate, and the output names them."""
    from codl_tvm.cli import main
    from codl_tvm.predictor import DATA_DIR

    doc = json.loads((DATA_DIR / "predictor-x86-cuda.json").read_text())
    doc["speed"] = {"cpu": 0.05, "gpu": 1.0}
    pred = tmp_path / "fast-cpu.json"
    pred.write_text(json.dumps(doc))
    out = tmp_path / "plan.json"
    assert main(["plan", "vgg-16", "--pair", "x86-cuda", "--arch", "sm_90", "--predictor",
                 str(pred), "--candidates", "-o", str(out)]) == 0
    plan = Plan.load(out)
    assert plan.single_device() is None and plan.candidates
    printed = capsys.readouterr().out
    for name, cand in plan.candidates.items():
        assert cand.single_device() is None and (cand.ops, cand.chains) != (plan.ops, plan.chains)
        assert f"candidate {name}: " in printed
    # explain prices each candidate on the same costs
    assert main(["explain", "vgg-16", "--pair", "x86-cuda", "--arch", "sm_90", "--plan",
                 str(out), "--predictor", str(pred), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["candidates"]) == set(plan.candidates)
    assert all(c["split_ops"] > 0 and c["coexec"] > 0 for c in doc["candidates"].values())


def test_bench_report_gives_each_candidates_speedup_and_the_guards_choice():
    from helpers import load_benchmark

    bench = load_benchmark("bench_models")
    guard = {"chosen": "plan-cpu-x1.25", "latency_ms": {
        "plan": 10.0, "plan-step-0.25": 9.0, "plan-cpu-x1.25": 8.0, "plan-cpu-x0.8": 12.5,
        "gpu-only": 10.0, "cpu-only": 30.0}}
    rows = [{"model": "m", "plan": "codl", "latency_ms": 8.0, "guard": guard}]
    table = bench.candidates_table(rows).splitlines()
    assert table[0] == ("| model | plan | plan-cpu-x0.8 | plan-cpu-x1.25 | plan-step-0.25 "
                        "| guard ran |")
    assert table[2] == "| m | 1.00 | 0.80 | 1.25 | 1.11 | plan-cpu-x1.25 |"
    assert bench.candidates_table([{"model": "m", "plan": "codl", "latency_ms": 1.0}]) == ""
    # a plan on the GPU (a candidate splits): the plan is its own GPU-only
    gpu_plan = {"chosen": "plan", "latency_ms": {"plan": 9.0, "plan-cpu-x0.8": 9.5,
                                                  "cpu-only": 30.0}}
    assert bench._plan_alone({"codl": {"guard": gpu_plan}}) == "1.00 (plan)"


def test_bench_report_gives_every_strategys_share_of_the_ideal_gain():
    from helpers import load_benchmark

    bench = load_benchmark("bench_models")
    rows = [{"model": "m", "plan": "codl", "ideal_share": 0.594},
            {"model": "m", "plan": "mulayer", "ideal_share": -0.004},
            {"model": "m", "plan": "eop", "ideal_share": -0.031}]
    table = bench.share_table(rows).splitlines()
    assert table[0].startswith("| model | layer-to-processor | mulayer |")
    cells = dict(zip(table[0].strip("| ").split(" | "), table[2].strip("| ").split(" | ")))
    assert cells["codl"] == "59%" and cells["mulayer"] == "0%" and cells["eop"] == "-3%"
    assert cells["oracle"] == "-"  # not built
