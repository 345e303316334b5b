"""Planner on real zoo models: graph, geometry against the pass, and every strategy's plan
compiled on the cpu-pair and checked against the unsplit model."""

from __future__ import annotations

import json

import numpy as np
import pytest

import codl_tvm
from codl_tvm import zoo
from codl_tvm.chains import consecutive_runs
from codl_tvm.graph import entry_function, find_anchors
from codl_tvm.planner import STRATEGIES, AnalyticCosts, build_graph, make_plan
from codl_tvm.planner.api import measured_costs
from codl_tvm.planner.search import unit_parts
from codl_tvm.unit_geometry import h_parts


@pytest.fixture(scope="module")
def tiny():
    return codl_tvm.load_model(zoo.get("tiny-cnn"))


@pytest.fixture(scope="module")
def resnet():
    return codl_tvm.load_model(zoo.get("resnet-18", input_shape=(32, 32)))


@pytest.fixture(scope="module")
def pair():
    return codl_tvm.DevicePair.preset("cpu-pair")


def test_graph_keeps_residual_joins_and_branches(resnet):
    mg = build_graph(resnet)
    g = mg.graph
    assert list(g.nodes) == [a.op_id for a in find_anchors(entry_function(resnet))]
    joins = [n for n in g if g.in_degree(n) > 1]
    forks = [n for n in g if g.out_degree(n) > 1]
    assert joins and forks
    # a conv feeding a residual add never chains into the next conv
    runs = consecutive_runs(resnet, "H", [n.op_id for n in mg.nodes])
    nxt = {r[i]: r[i + 1] for r in runs for i in range(len(r) - 1)}
    for n in mg.nodes:
        assert n.chain_next["H"] == (n.op_id in nxt)


@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.73, 0.95])
def test_chain_rows_match_the_partition_pass(tiny, ratio):
    anchors = find_anchors(entry_function(tiny))
    mg = build_graph(tiny)
    for start in range(len(anchors) - 1):
        for end in range(start + 1, len(anchors)):
            if not all(mg.nodes[i].chain_next["H"] for i in range(start, end)):
                break
            mine = unit_parts(mg.nodes[start:end + 1], "H", ratio)
            if mine is None:  # one side empty or reading only padding: the pass refuses too
                continue
            theirs = h_parts(anchors[start:end + 1], ratio)
            for role in ("gpu", "cpu"):
                got = [s.H for s in mine[role]]
                want = [p.src[1] - p.src[0] for p in theirs[role]]
                assert got == want


def _check_runs(mod, pair, plan, inputs, expected):
    exe = codl_tvm.compile(mod, pair, plan)
    for got, want in zip(exe.run(inputs), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.fixture(scope="module")
def measured(tiny, pair, tmp_path_factory):
    cache = tmp_path_factory.mktemp("costs") / "tiny.csv"
    return measured_costs(tiny, pair, cache, grid=(0.5, 1.0), progress=False), cache


def test_every_strategy_runs_and_matches_the_unsplit_model(tiny, pair, measured, tmp_path):
    ref = codl_tvm.compile(tiny, pair, None)
    inputs = ref.random_inputs(1)
    expected = ref.run(inputs)
    cheap = AnalyticCosts(sync_us=0.5, copy_gbps=100.0)  # cheap sharing: plans do split
    splits = 0
    for name, strategy in STRATEGIES.items():
        res = make_plan(tiny, name, measured[0] if strategy.measured else cheap)
        path = tmp_path / f"{name}.json"
        res.plan.save(path)
        plan = codl_tvm.Plan.load(path)  # the JSON round trip is what gets compiled
        assert plan.to_json() == res.plan.to_json()
        splits += sum(p.place == "split" for p in plan.ops.values())
        _check_runs(tiny, pair, plan, inputs, expected)
    assert splits > 0


def test_codl_chains_and_residuals_compile_on_resnet(resnet, pair):
    # sharing dear enough that saving it pays (channel splits pay no concat, so at 0.2 us a
    # sync every op is split on its own), launches cheap enough that a split op's epilogue
    # kernel (fused away when it runs whole) does not cost more than the split saves
    res = make_plan(resnet, "codl", AnalyticCosts(sync_us=1.0, copy_gbps=100.0,
                                                  gpu_launch_us=1.0, cpu_launch_us=1.0))
    assert res.plan.chains, "compute-heavy costs with dearer sharing should give chains"
    runs = consecutive_runs(resnet, "H", list(res.plan.ops))
    for chain in res.plan.chains:
        assert any(chain.ops == r[r.index(chain.ops[0]):][:len(chain.ops)]
                   for r in runs if chain.ops[0] in r)
    ref = codl_tvm.compile(resnet, pair, None)
    inputs = ref.random_inputs(2)
    _check_runs(resnet, pair, res.plan, inputs, ref.run(inputs))


def test_cli_plan_and_bench(tiny, measured, tmp_path, capsys):
    from codl_tvm.cli import main

    _, cache = measured
    out = tmp_path / "plan.json"
    onnx = zoo.get("tiny-cnn")
    assert main(["plan", str(onnx), "--pair", "cpu-pair", "--strategy", "oracle",
                 "--cache", str(cache), "-o", str(out)]) == 0
    codl_tvm.Plan.load(out).validate(tiny)
    rows_path = tmp_path / "bench.json"
    assert main(["bench", "tiny-cnn", "--pair", "cpu-pair", "--predictor", "measured",
                 "--cache", str(cache), "--plans", "cpu-only,gpu-only,codl", "--rounds", "2",
                 "--json", str(rows_path)]) == 0
    rows = json.loads(rows_path.read_text())
    assert [r["plan"] for r in rows] == ["cpu-only", "gpu-only", "codl"]
    for r in rows:
        assert {"latency_ms", "speedup", "ideal_share", "predicted_ms"} <= set(r)
        assert r["max_rel_err"] <= 1e-5


def test_unknown_strategy_and_missing_costs_are_clear_errors(tiny):
    with pytest.raises(ValueError, match="unknown strategy 'fast'"):
        make_plan(tiny, "fast", AnalyticCosts())
    with pytest.raises(ValueError, match="needs a cost source"):
        make_plan(tiny, "codl", None)


def test_bench_times_identical_plans_once(tiny, pair):
    """Regression: two names for one plan were timed apart, and noise made one 'slower'."""
    from codl_tvm.planner.bench import bench

    costs = AnalyticCosts(cpu_gflops=1.0, gpu_gflops=1000.0)  # the GPU wins everything
    rows = bench(tiny, pair, ["gpu-only", "cpu-only", "codl"], costs, rounds=2)
    by = {r["plan"]: r for r in rows}
    assert by["codl"]["same_as"] == "gpu-only" and "same_as" not in by["gpu-only"]
    assert by["codl"]["latency_ms"] == by["gpu-only"]["latency_ms"]
    assert by["cpu-only"]["latency_ms"] != by["gpu-only"]["latency_ms"]
    assert all(r["max_rel_err"] <= 1e-5 for r in rows)


def test_offline_bench_bundle_runs_runtime_only(measured, tmp_path):
    """`codl-tvm bench --bundle` compiles here; the bundle runner times it in a process that
    has only TVM's runtime, and writes the same rows as `bench --json`."""
    import os
    import subprocess
    import sys

    from codl_tvm.cli import main

    _, cache = measured
    folder = tmp_path / "bundle"
    assert main(["bench", "tiny-cnn", "--pair", "cpu-pair", "--predictor", "measured",
                 "--cache", str(cache), "--plans", "cpu-only,gpu-only,codl,oracle",
                 "--bundle", str(folder)]) == 0
    # rebuilding one plan keeps the others
    assert main(["bench", "tiny-cnn", "--pair", "cpu-pair", "--predictor", "measured",
                 "--cache", str(cache), "--plans", "oracle", "--bundle", str(folder)]) == 0
    index = json.loads((folder / "index.json").read_text())
    assert set(index["tiny-cnn"]["plans"]) == {"cpu-only", "gpu-only", "codl", "oracle"}
    assert (folder / "tiny-cnn" / "cpu-only" / "manifest.json").is_file()
    out = tmp_path / "rows.json"
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1")
    proc = subprocess.run([sys.executable, "-m", "codl_tvm.planner.bundle", str(folder),
                           "-o", str(out), "--rounds", "2"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["tiny-cnn"]
    assert [r["plan"] for r in rows] == ["cpu-only", "gpu-only", "codl", "oracle"]
    for r in rows:
        assert {"latency_ms", "speedup", "ideal_share", "predicted_ms"} <= set(r)
        if "same_as" in r:  # identical plans share one measurement
            twin = next(x for x in rows if x["plan"] == r["same_as"])
            assert twin["latency_ms"] == r["latency_ms"]


def test_a_guarded_bench_bundle_runs_the_fastest_and_records_the_choice(measured, tmp_path):
    from codl_tvm.cli import main
    from codl_tvm.planner import bundle

    _, cache = measured
    folder = tmp_path / "bundle"
    assert main(["bench", "tiny-cnn", "--pair", "cpu-pair", "--predictor", "measured",
                 "--cache", str(cache), "--plans", "eop-equal", "--guard",
                 "--bundle", str(folder)]) == 0
    manifest = json.loads((folder / "tiny-cnn" / "eop-equal" / "manifest.json").read_text())
    assert manifest["alternatives"] == [{"name": "gpu-only", "dir": "../gpu-only"},
                                        {"name": "cpu-only", "dir": "../cpu-only"}]
    rows = bundle.run(folder, tmp_path / "rows.json", rounds=2)["tiny-cnn"]
    by = {r["plan"]: r for r in rows}
    guard = by["eop-equal"]["guard"]
    assert set(guard["latency_ms"]) == {"plan", "gpu-only", "cpu-only"}
    assert guard["latency_ms"][guard["chosen"]] == min(guard["latency_ms"].values())
    assert "guard" not in by["gpu-only"]
    # adapting: the row also says what the guard ran, call after call
    rows = bundle.run(folder, tmp_path / "rows-adapt.json", rounds=3, adapt=True)["tiny-cnn"]
    adaptive = {r["plan"]: r for r in rows}["eop-equal"]["guard"]["adaptive"]
    assert adaptive["running"] in adaptive["calls"]
    assert sum(adaptive["calls"].values()) == 1 + 3  # the warm-up visit and three rounds


def test_bench_bundle_runner_names_a_missing_bundle(tmp_path):
    from codl_tvm.commands.artifact import bundle_main
    from codl_tvm.planner import bundle

    with pytest.raises(FileNotFoundError, match="not a bench bundle"):
        bundle.run(tmp_path, tmp_path / "rows.json")
    assert bundle_main([str(tmp_path), "-o", str(tmp_path / "rows.json")]) == 1
    assert not (tmp_path / "rows.json").exists()
