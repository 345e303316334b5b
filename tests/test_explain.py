"""explain: op specs from graph ops, cost sources, timeline layout and its picture."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import conv, single_function
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import relax
from tvm.relax import op as rop

import codl_tvm
from codl_tvm import zoo
from codl_tvm.explain import explain, op_spec, plan_rows
from codl_tvm.plan import Chain, OpPlacement, Plan
from codl_tvm.planner.costs import AnalyticCosts, MeasuredCosts, PredictorCosts
from codl_tvm.predictor import OpSpec, train
from codl_tvm.predictor.split_sharing import SplitUnit
from codl_tvm.profiler import space
from codl_tvm.single_op import single_op_module
from codl_tvm.timeline import LANES, draw


@pytest.fixture(scope="module")
def tiny():
    return codl_tvm.load_model(zoo.get("tiny-cnn"))


def linear_rows(pair: str = "cpu-pair") -> list[dict]:
    """Sample rows of a made-up pair: GPU 3x faster than the CPU, copies linear in bytes."""
    kinds = ["conv2d", "pool_max", "pool_avg", "dense"]
    specs = space.sample_specs(40, 0, max_flops=1e8, kinds=kinds)
    rows = []
    for job in space.compute_jobs(specs, (0.2, 0.5, 0.8, 1.0)):
        row = job.row(pair, {"kind": "llvm"})
        rate = 3e3 if job.role == "gpu" else 1e3  # FLOPs per us
        row.update(algorithm="direct", block=0, unit=1, cores=1, spread_us=0.0, repeat=3,
                   latency_us=2.0 + job.sub.flops / rate)  # fmt: skip
        rows.append(row)
    for job in space.sharing_jobs(6, 1 << 22):
        row = job.row(pair, {"kind": "llvm"})
        row.update(algorithm="copy", block=0, unit=1, cores=1, spread_us=0.0, repeat=3,
                   latency_us=5.0 + 1e-3 * row["bytes"])  # fmt: skip
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def depthwise():
    """conv -> depthwise conv -> conv: a grouped op, whose channel split slices its input."""
    rng = np.random.default_rng(0)

    def body(bb, x):
        y = conv(bb, x, rng, 16, 3, padding=(1, 1, 1, 1))
        y = conv(bb, y, rng, 16, 3, padding=(1, 1, 1, 1), groups=16)
        return conv(bb, y, rng, 8, 1)

    return codl_tvm.load_model(single_function((1, 8, 24, 24), body))


@pytest.fixture(scope="module")
def predictor():
    return train(linear_rows(), kind="flops")


# ---- op specs ---------------------------------------------------------------------------------
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(3, 20), w=st.integers(3, 12), k=st.sampled_from([1, 3, 5]),
       stride=st.integers(1, 2), pad=st.integers(0, 2), depthwise=st.booleans(),
       pool=st.sampled_from([None, "max", "avg"]))  # fmt: skip
def test_op_spec_matches_the_graph_op(h, w, k, stride, pad, depthwise, pool):
    rng = np.random.default_rng(0)
    c = 4

    def body(bb, x):
        if pool:
            fn = rop.nn.max_pool2d if pool == "max" else rop.nn.avg_pool2d
            return fn(x, (k, k), (stride, stride), (pad, pad, pad, pad))
        groups = c if depthwise else 1
        weight = relax.const(rng.standard_normal((c, c // groups, k, k)).astype("float32"))
        return rop.nn.conv2d(x, weight, strides=stride, padding=(pad, pad, pad, pad),
                             groups=groups)

    if k + 2 * pad - 1 >= min(h, w) + 2 * pad or (pool and pad * 2 >= k):
        return  # no output / pool padding TVM rejects
    mod = codl_tvm.load_model(single_function((1, c, h, w), body))
    (desc,) = codl_tvm.list_ops(mod)
    spec, repeat = op_spec(desc)
    assert repeat == 1
    assert [1, spec.OC, spec.out_h, spec.out_w] == desc["out"]
    assert spec.kind == ({"max": "pool_max", "avg": "pool_avg"}[pool] if pool else
                         "depthwise" if depthwise else "conv2d")


def test_op_spec_of_matmuls():
    dense = {"kind": "matmul", "in": [1, 256], "out": [1, 10], "weight": [256, 10]}
    assert op_spec(dense) == (OpSpec("dense", 1, 1, 256, 10), 1)
    tokens = {"kind": "matmul", "in": [2, 12, 64, 32], "out": [2, 12, 64, 16]}
    spec, repeat = op_spec(tokens)
    assert (spec.kind, spec.H, spec.IC, spec.OC, repeat) == ("conv2d", 64, 32, 16, 24)
    assert spec.flops * repeat == 2 * 2 * 12 * 64 * 32 * 16


@pytest.mark.parametrize("model", ["fast-style-transfer", "inception-v3"])
def test_op_spec_is_the_planners(model):
    """explain prices each op with the spec the planner's graph gives it (one derivation:
    ``planner.nodes.desc_spec``); ConvTransposes, pools and convs of every kind."""
    from codl_tvm.planner.opgraph import build_graph

    mod = zoo.load(model)
    specs = [(n.spec, n.repeat) for n in build_graph(mod).nodes]
    assert specs == [op_spec(d) for d in codl_tvm.list_ops(mod)]
    assert all(spec is not None for spec, _ in specs)


# ---- costs and layout -------------------------------------------------------------------------
def test_unchained_split_rows_equal_predict_op(tiny, predictor):
    plan = Plan.uniform(tiny, "OC", 0.6)
    result = explain(tiny, plan, PredictorCosts(predictor))
    specs = {d["id"]: op_spec(d)[0] for d in codl_tvm.list_ops(tiny)}
    for row in result.rows:
        assert row["place"] == "split"
        want = predictor.predict_op(specs[row["op"]], "OC", 0.6)
        for key in ("cpu_us", "gpu_us", "share_us", "total_us"):
            assert row[key] == pytest.approx(want[key], rel=1e-9), (row["op"], key)
    assert result.timeline.coexec_us == pytest.approx(sum(r["total_us"] for r in result.rows))


def test_single_processor_plans(tiny, predictor):
    costs = PredictorCosts(predictor)
    gpu = explain(tiny, Plan.single(tiny, "gpu"), costs).timeline
    assert gpu.coexec_us == pytest.approx(gpu.gpu_only_us)
    assert gpu.share_us == 0 and not gpu.lane("cpu")
    cpu_plan = Plan.single(tiny, "cpu")
    cpu_plan.io_device = "gpu"  # input starts on the GPU: one copy in, ops stay on the CPU
    cpu = explain(tiny, cpu_plan, costs).timeline
    first = op_spec(codl_tvm.list_ops(tiny)[0])[0]
    assert cpu.share_us == pytest.approx(predictor.sharing_.cost("to_cpu", "cpu", first.in_bytes))
    assert cpu.coexec_us == pytest.approx(cpu.cpu_only_us + cpu.share_us)
    assert cpu.gpu_only_us < cpu.cpu_only_us  # the made-up GPU is 3x faster


def test_chain_shares_only_at_its_ends(tiny, predictor):
    plan = Plan.uniform(tiny, "H", 0.5, chain=True)
    result = explain(tiny, plan, PredictorCosts(predictor))
    chained = [r for r in result.rows if r["chain"]]
    assert len(chained) >= 3
    assert chained[0]["share_us"] > 0 and chained[-1]["share_us"] > 0
    assert all(r["share_us"] == 0 for r in chained[1:-1])
    tl = result.timeline
    ends = {lane: max((b.start_us + b.dur_us for b in tl.lane(lane)), default=0) for lane in LANES}
    assert ends["gpu"] == pytest.approx(tl.coexec_us) and ends["cpu"] <= tl.coexec_us + 1e-9
    for lane in ("gpu", "cpu", "gpu-only", "cpu-only"):  # boxes of one lane never overlap
        boxes = sorted(tl.lane(lane), key=lambda b: b.start_us)
        assert all(a.start_us + a.dur_us <= b.start_us + 1e-9 for a, b in zip(boxes, boxes[1:]))
    shares = {(b.start_us, b.dur_us) for b in tl.boxes if b.kind == "share"}
    assert {(b.start_us, b.dur_us) for b in tl.lane("cpu") if b.kind == "share"} == shares


def test_placeholder_splits_work_by_flops(tiny):
    plan = Plan.uniform(tiny, "OC", 0.75)
    result = explain(tiny, plan, AnalyticCosts.placeholder())
    assert result.unit != "us" and "PLACEHOLDER" in result.source
    conv = next(r for r in result.rows if r["op"] == "conv2d_1")  # 16 channels: 12 + 4
    assert conv["gpu_us"] == pytest.approx(3 * conv["cpu_us"])


def test_unsplittable_op_becomes_a_note(tiny, predictor):
    plan = Plan(ops={"matmul_0": OpPlacement("split", "H", 0.5)})
    result = explain(tiny, plan, PredictorCosts(predictor))
    assert any("matmul_0" in note for note in result.notes)
    assert next(r for r in result.rows if r["op"] == "matmul_0")["place"] == "gpu"


def test_bad_chain_is_a_plan_error(tiny, predictor):
    plan = Plan(ops={}, chains=[Chain(["conv2d_0", "conv2d_2"], "H", 0.5)])
    with pytest.raises(codl_tvm.PlanError, match="chain"):
        explain(tiny, plan, PredictorCosts(predictor))


def test_measured_costs_time_real_single_op_models():
    spec = OpSpec("conv2d", 12, 12, 8, 8, 3, 3, pad=(1, 1, 1, 1))
    mod = single_op_module(spec)
    assert [d["id"] for d in codl_tvm.list_ops(mod)] == ["conv2d_0"]
    costs = MeasuredCosts(pair=codl_tvm.DevicePair.preset("cpu-pair"), repeat=3)
    assert costs.slow and costs.label.startswith("measured on cpu-pair")
    first = costs.kernel_us("cpu", spec)
    assert 0 < first < 1e6 and costs.kernel_us("cpu", spec) == first  # cached, not re-timed
    share = costs.split_sharing(SplitUnit.of(spec, "H", 0.5))  # measured in place
    assert share.lead_us >= 0 and share.join_us >= 0 and math.isfinite(share.pre_us)
    assert share.pre_us + share.post_us == pytest.approx(share.lead_us + share.join_us)
    assert costs.move_us(spec, "to_cpu") >= 0


def test_plan_rows_still_describe_placement(tiny):
    rows = plan_rows(tiny, Plan.uniform(tiny, "H", 0.5))
    conv = rows[0]
    assert (conv["place"], conv["gpu"], conv["cpu"]) == ("split", "rows 0-15", "rows 16-31")


# ---- picture ----------------------------------------------------------------------------------
def test_draw_writes_a_readable_png(tmp_path, tiny, predictor):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    result = explain(tiny, Plan.uniform(tiny, "H", 0.5, chain=True), PredictorCosts(predictor))
    path = draw(result.timeline, tmp_path / "t.png", title="tiny-cnn", unit=result.unit)
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 1000
    assert image[..., :3].std() > 0.1  # not a blank canvas


def test_explain_times_ops_in_the_model_context_like_the_planner():
    # the shipped H100 predictor: a model beyond the GPU's L2 streams its GEMV weights cold,
    # and the explained times must be the ones the planner decided with
    from codl_tvm.planner.costs import PredictorCosts
    from codl_tvm.predictor import default_for

    pred = default_for("x86-cuda")
    fc = OpSpec("dense", 1, 1, 512, 1000, 1, 1)
    costs = PredictorCosts(pred)
    beyond = pred.machine_.l2_bytes + 1
    assert costs.in_model(pred.machine_.l2_bytes) is costs
    cold = costs.in_model(beyond)
    assert cold.label == costs.label
    assert cold.kernel_us("gpu", fc) > costs.kernel_us("gpu", fc)
    assert cold.kernel_us("gpu", fc) == costs.in_model(beyond).kernel_us("gpu", fc)


@pytest.mark.parametrize("wrap", [None, "SerialCosts", "OverlappedCosts", "BlockCopyCosts"])
@pytest.mark.parametrize("model", ["tiny", "depthwise"])
def test_explain_totals_what_the_planner_priced(request, predictor, wrap, model):
    # one price of a split's sharing for the planner and explain: each split op's total is
    # the planner's UnitCost; on a CUDA pair a split's copies delay the CPU's part only
    # (OverlapCopies), and with block copies its rows move by copies within the GPU
    # (LowerSlicesToBlockCopies). A grouped (depthwise) op split by channels slices its input.
    from codl_tvm.planner import costs as planner_costs
    from codl_tvm.planner.api import build_graph
    from codl_tvm.planner.search import Evaluator

    mod = request.getfixturevalue(model)
    mg = build_graph(mod)
    by_id = {n.op_id: n for n in mg.nodes}
    # the made-up pair's predictor has no depthwise samples: analytic times there
    plain = PredictorCosts(predictor) if model == "tiny" else AnalyticCosts(sync_us=5.0)
    over = getattr(planner_costs, wrap)(plain) if wrap else plain
    checked = 0
    for dim in ("H", "OC"):
        plan = Plan.uniform(mod, dim, 0.6)
        serial, both = explain(mod, plan, plain), explain(mod, plan, over)
        for a, b in zip(serial.rows, both.rows):
            if wrap == "OverlappedCosts" and dim == "OC":  # rows: the CPU's part in
                # chunks, its sharing and launches priced as such (test_cpu_chunks)
                assert b["total_us"] <= a["total_us"] + 1e-9
                assert b["share_us"] == pytest.approx(a["share_us"])
            node = by_id[b["op"]]
            unit = Evaluator(over, [node]).unit([node], dim, 0.6)
            if b["place"] == "split" and unit is not None:
                assert b["total_us"] == pytest.approx(unit.total_us, rel=1e-6), b["op"]
                assert b["share_us"] == pytest.approx(unit.share_us, rel=1e-6), b["op"]
                checked += 1
        if wrap == "OverlappedCosts":
            assert both.timeline.coexec_us <= serial.timeline.coexec_us
    assert checked
    if model == "depthwise":  # the grouped op's channel split pays a slice of its input,
        # unless block copies move the CPU's channels and the GPU's kernel reads its own
        unit = Evaluator(over, [by_id["conv2d_1"]]).unit([by_id["conv2d_1"]], "OC", 0.6)
        blocks = wrap == "BlockCopyCosts"
        assert (unit.gpu_side_us > 0) != blocks and (unit.lead_us > 0) != blocks


def test_sharing_total_counts_copies_on_the_cpu_lane(tiny, predictor):
    # regression: where copies overlap kernels a split's copies sit on the CPU's lane alone,
    # and the total of sharing counted the GPU's lane only (0 us with block copies)
    from codl_tvm.planner.costs import BlockCopyCosts

    costs = BlockCopyCosts(PredictorCosts(predictor))
    result = explain(tiny, Plan.uniform(tiny, "H", 0.6), costs)
    tl = result.timeline
    assert any(b.kind == "share" for b in tl.lane("cpu"))
    assert tl.share_us > 0
    assert tl.share_us == pytest.approx(sum(r["share_us"] for r in result.rows))


def test_chain_kernels_and_sharing_are_the_planners(tiny, predictor):
    # a chain's rows grow backwards as the planner (and the partition pass) cut them, and
    # its sharing is the planner's: per chain, the rows' sums are the planner's UnitCost
    from codl_tvm.planner.api import build_graph
    from codl_tvm.planner.search import Evaluator

    by_id = {n.op_id: n for n in build_graph(tiny).nodes}
    costs = PredictorCosts(predictor)
    plan = Plan.uniform(tiny, "H", 0.5, chain=True)
    rows = {r["op"]: r for r in explain(tiny, plan, costs).rows}
    assert plan.chains
    for chain in plan.chains:
        nodes = [by_id[op] for op in chain.ops]
        unit = Evaluator(costs, nodes).unit(nodes, chain.dim, chain.ratio)
        for key, want in (("cpu_us", unit.cpu_us), ("gpu_us", unit.gpu_us),
                          ("share_us", unit.share_us)):
            got = sum(rows[op][key] for op in chain.ops)
            assert got == pytest.approx(want, rel=1e-9), (chain.ops, key)


def test_cli_explain_prices_the_cpu_pair_as_the_planner_does():
    """Regression: ``codl-tvm explain --predictor`` on the cpu-pair drew a split's two parts
    side by side while the planner priced them one after the other (both roles share the
    host's cores)."""
    from codl_tvm.commands.explain import _as_run
    from codl_tvm.planner.costs import SerialCosts

    costs = _as_run(AnalyticCosts.placeholder(), "cpu-pair", None)
    assert isinstance(costs, SerialCosts) and not costs.concurrent
