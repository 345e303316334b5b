"""Parallel branches whole on both processors: priced as running at once, planned by codl."""

from __future__ import annotations

import numpy as np
import pytest
from test_issue_gpu_work_first import towers

from codl_tvm.explain import explain
from codl_tvm.planner.api import make_plan
from codl_tvm.planner.baselines import distribute_branches
from codl_tvm.planner.branches import overlap_us, parallel_branches
from codl_tvm.planner.costs import AnalyticCosts, SerialCosts
from codl_tvm.planner.opgraph import build_graph
from codl_tvm.planner.search import Evaluator, Layout, layout_cost
from codl_tvm.planner.strategies import Options

# a CPU half the GPU's speed: per-op splits win something, whole towers on the CPU more
COSTS = AnalyticCosts(cpu_gflops=4.0, gpu_gflops=8.0, sync_us=20.0, copy_gbps=20.0,
                      cpu_launch_us=1.0, gpu_launch_us=1.0)


@pytest.fixture(scope="module")
def model():
    return towers(np.random.default_rng(0), c=64, hw=28)


@pytest.fixture(scope="module")
def graph(model):
    return build_graph(model)


def _with_towers_on_cpu(mg, on_cpu: tuple[int, ...]) -> Layout:
    towers_ = parallel_branches(mg.nodes)[0]
    lay = Layout({n.op_id: ("gpu", None, None) for n in mg.nodes})
    for t in on_cpu:
        for n in towers_[t]:
            lay.ops[n.op_id] = ("cpu", None, None)
    return lay


def test_whole_towers_on_both_processors_save_the_shorter_side(graph):
    ev = Evaluator(COSTS, graph.nodes, graph.glue)
    towers_ = parallel_branches(graph.nodes)[0]
    lay = _with_towers_on_cpu(graph, (1, 3))
    cpu = sum(ev.whole(n, "cpu") for t in (1, 3) for n in towers_[t])
    gpu = sum(ev.whole(n, "gpu") for t in (0, 2) for n in towers_[t])
    assert overlap_us(ev, graph.nodes, lay) == pytest.approx(min(cpu, gpu))
    # all on one processor, or on cores both roles share: nothing runs at once
    assert overlap_us(ev, graph.nodes, _with_towers_on_cpu(graph, ())) == 0.0
    serial = Evaluator(SerialCosts(COSTS), graph.nodes, graph.glue)
    assert overlap_us(serial, graph.nodes, lay) == 0.0


def test_a_tower_with_a_split_op_runs_beside_nothing(graph):
    ev = Evaluator(COSTS, graph.nodes, graph.glue)
    towers_ = parallel_branches(graph.nodes)[0]
    lay = _with_towers_on_cpu(graph, (1,))
    alone = overlap_us(ev, graph.nodes, lay)
    lay.ops[towers_[0][0].op_id] = ("split", "OC", 0.5)  # tower 0 now on both processors
    cpu = sum(ev.whole(n, "cpu") for n in towers_[1])
    gpu = sum(ev.whole(n, "gpu") for t in (2, 3) for n in towers_[t])
    saved = overlap_us(ev, graph.nodes, lay)
    assert saved == pytest.approx(min(cpu, gpu))
    assert saved <= alone + 1e-9


def test_codl_runs_towers_on_the_cpu_where_that_beats_every_split(graph):
    plain = make_plan(graph, "codl", COSTS, Options(branches=False, min_plan_gain=0.0))
    towered = make_plan(graph, "codl", COSTS, Options(min_plan_gain=0.0))
    gpu = make_plan(graph, "gpu-only", COSTS)
    ev = Evaluator(COSTS, graph.nodes, graph.glue)
    assert plain.predicted_us == pytest.approx(layout_cost(ev, graph.nodes, plain.layout))
    assert towered.predicted_us < min(plain.predicted_us, gpu.predicted_us)
    assert "cpu" in {p.place for p in towered.plan.ops.values()}
    assert any("parallel branches" in note for note in towered.plan.notes)  # explained


def test_distribution_never_raises_the_estimate(graph):
    ev = Evaluator(COSTS, graph.nodes, graph.glue)
    for on_cpu in [(), (0,), (1, 2), (0, 1, 2, 3)]:
        lay = _with_towers_on_cpu(graph, on_cpu)
        before = layout_cost(ev, graph.nodes, lay)
        after = layout_cost(ev, graph.nodes, distribute_branches(ev, graph.nodes, lay, keep=True))
        assert after <= before + 1e-9


def test_explain_draws_whole_towers_on_both_processors_at_once(model, graph):
    plan = make_plan(graph, "codl", COSTS, Options(min_plan_gain=0.0)).plan
    result = explain(model, plan, COSTS)
    tl = result.timeline
    cpu = [b for b in tl.lane("cpu") if b.kind != "share"]
    gpu = [b for b in tl.lane("gpu") if b.kind != "share"]
    assert cpu and gpu
    assert min(b.start_us for b in cpu) < max(b.start_us + b.dur_us for b in gpu)  # overlap
    assert tl.overlap_us > 0 and "parallel branches" in result.summary()
    assert tl.coexec_us == pytest.approx(sum(r["total_us"] for r in result.rows) - tl.overlap_us)
    for lane in ("cpu", "gpu"):  # each processor runs one thing at a time
        boxes = sorted(tl.lane(lane), key=lambda b: b.start_us)
        assert all(a.start_us + a.dur_us <= b.start_us + 1e-9 for a, b in zip(boxes, boxes[1:]))
    # where the roles share cores, the same plan runs one branch after the other
    serial = explain(model, plan, SerialCosts(COSTS)).timeline
    assert serial.overlap_us == 0.0
    assert serial.coexec_us > tl.coexec_us


def test_explain_reports_the_planners_estimate_of_the_plan(model, graph):
    # the timeline draws the anchors; the planner's estimate adds the ops between them
    result = make_plan(graph, "codl", COSTS, Options(min_plan_gain=0.0))
    explained = explain(model, result.plan, COSTS)
    assert explained.planned_us == pytest.approx(result.predicted_us)
    assert f"{result.predicted_us:.1f}" in explained.summary()
