"""The ops between the planned ones: collected from the module, priced where they run."""

from __future__ import annotations

import pytest

import codl_tvm
from codl_tvm import zoo
from codl_tvm.planner import AnalyticCosts, MeasuredCosts, build_graph
from codl_tvm.planner.opgraph import ModelGraph
from codl_tvm.planner.search import Evaluator, Layout, layout_cost


@pytest.fixture(scope="module")
def resnet() -> ModelGraph:
    return build_graph(codl_tvm.load_model(zoo.get("resnet-18")))


def test_residual_adds_and_activations_are_glue_and_views_are_not(resnet) -> None:
    ops = {g.op for g in resnet.glue}
    assert {"relax.add", "relax.nn.relu", "relax.mean"} <= ops
    assert not ops & {"relax.reshape", "relax.flatten"}
    ids = {n.op_id for n in resnet.nodes}
    adds = [g for g in resnet.glue if g.op == "relax.add"]
    assert adds and all(g.source in ids for g in adds)  # each follows a planned op
    mean = next(g for g in resnet.glue if g.op == "relax.mean")
    assert mean.shape[2] * mean.shape[3] > 1  # a reduction is priced on what it reads
    assert ModelGraph.from_json(resnet.to_json()).glue == resnet.glue


def test_glue_runs_on_the_device_of_the_op_it_follows(resnet) -> None:
    costs = AnalyticCosts()
    bare, full = Evaluator(costs, resnet.nodes), Evaluator(costs, resnet.nodes, resnet.glue)
    for role in ("gpu", "cpu"):
        lay = Layout(ops={n.op_id: (role, None, None) for n in resnet.nodes}, io=role)
        glue_us = sum(full.glue_us(g, role) for g in resnet.glue if not g.fused(set()))
        assert glue_us > 0
        assert layout_cost(full, resnet.nodes, lay) == pytest.approx(
            layout_cost(bare, resnet.nodes, lay) + glue_us)
    # one op moved to the CPU takes the glue that follows it along
    first = next(g.source for g in resnet.glue if g.source is not None)
    lay = Layout(ops={first: ("cpu", None, None)}, io="gpu")
    own = [g for g in resnet.glue if not g.fused(set())]
    moved = [g for g in own if g.source == first]
    delta = sum(full.glue_us(g, "cpu") - full.glue_us(g, "gpu") for g in moved)
    assert layout_cost(full, resnet.nodes, lay) - layout_cost(bare, resnet.nodes, lay) == (
        pytest.approx(sum(full.glue_us(g, "gpu") for g in own) + delta))


def test_costs_that_cannot_price_glue_leave_it_out(resnet) -> None:
    ev = Evaluator(MeasuredCosts([], "nothing measured"), resnet.nodes, resnet.glue)
    assert all(ev.glue_us(g, "gpu") == 0.0 for g in resnet.glue)


@pytest.mark.parametrize(
    "name", ["resnet-18", "mobilenet-v2", "fast-style-transfer", "inception-v3"])
def test_glue_kernels_are_those_the_compiled_model_runs(name) -> None:
    # every planned op is one kernel with its epilogue; every glue op that is not fused and
    # not a view is one more (FuseEpilogues' rule, as the planner prices it)
    mod = codl_tvm.load_model(zoo.get(name))
    mg = build_graph(mod)
    own = [g for g in mg.glue if not g.fused(set())]
    exe = codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"))
    assert exe.kernel_calls() == len(mg.nodes) + len(own)
    assert len(own) < len(mg.glue)  # something fused


def test_glue_after_a_split_op_runs_after_its_concat(resnet) -> None:
    costs = AnalyticCosts()
    ev = Evaluator(costs, resnet.nodes, resnet.glue)
    first = next(g.into for g in resnet.glue if g.into)
    whole = Layout(ops={}, io="gpu")
    split = Layout(ops={first: ("split", "OC", 0.5)}, io="gpu")
    after = [g for g in resnet.glue if g.into == first]
    assert after and all(g.fused(set()) and not g.fused({first}) for g in after)
    bare = Evaluator(costs, resnet.nodes)
    extra = layout_cost(ev, resnet.nodes, split) - layout_cost(bare, resnet.nodes, split)
    base = layout_cost(ev, resnet.nodes, whole) - layout_cost(bare, resnet.nodes, whole)
    assert extra == pytest.approx(base + sum(ev.glue_us(g, "gpu") for g in after))


def test_measuring_a_model_measures_its_glue_kernels_whole_on_each_processor(resnet) -> None:
    # measured costs price a plan's glue from the model's own samples, not as free
    from codl_tvm.planner.api import oracle_jobs

    jobs = oracle_jobs(resnet)
    glue = {g.spec() for g in resnet.glue}
    measured = {(j.role, j.spec) for j in jobs if j.spec in glue}
    assert measured == {(role, spec) for spec in glue for role in ("cpu", "gpu")}
    assert all(j.spec.part(j.role, j.dim, j.ratio) == j.spec for j in jobs if j.spec in glue)
    assert len([j for j in jobs if j.spec in glue]) == 2 * len(glue)
