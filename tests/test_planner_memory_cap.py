"""The plan's memory cap counts the memory the pair's roles share.

An H split holds the whole weight on both sides. On a phone or a Jetson that is one DRAM, so
the cap counts both roles' bytes. A discrete GPU has memory of its own: the CPU's copy lives
in the host's RAM, the GPU's memory never grows, and capping the sum threw away PoseNet's
7x7-conv splits (11% of its predicted gain at 8 SMs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from codl_tvm import DevicePair
from codl_tvm.planner.api import for_pair
from codl_tvm.planner.candidates import ScaledCosts
from codl_tvm.planner.cost_source import as_source
from codl_tvm.planner.costs import PairCosts
from codl_tvm.planner.memory import capped_bytes, layout_memory
from codl_tvm.planner.nodes import OpNode
from codl_tvm.planner.search import Evaluator, Layout
from codl_tvm.planner.strategies import STRATEGIES, Options, single
from codl_tvm.predictor.opspec import OpSpec


@dataclass
class RowCosts:
    """10 us per output row on either processor: every op gains most from an H split at
    0.5; OC splits and copies cost more than they save (one channel unit)."""

    label: str = "rows"

    def kernel_us(self, role: str, sub: OpSpec) -> float:
        return 10.0 * sub.H + (50.0 if sub.OC < 64 else 0.0)

    def sharing_us(self, op: str, role: str, nbytes: float) -> float:
        return 1.0


def heavy_node(i: int, weight_bytes: int = 64 << 20) -> OpNode:
    """A conv whose weight dwarfs its activations (PoseNet's 7x7 convs, VGG's FCs)."""
    spec = OpSpec("conv2d", 32, 32, 64, 64, 1, 1)
    shape = [1, 64, 32, 32]
    return OpNode(f"conv2d_{i}", "conv2d", spec, i, shape, shape, weight_bytes, ("H", "OC"),
                  [f"conv2d_{i - 1}"] if i else [], {"H": False, "OC": False}, i)


def plan(costs, nodes: list[OpNode]) -> Layout:
    return STRATEGIES["codl"].fn(nodes, Evaluator(costs), Options())


def test_shared_memory_caps_both_roles_and_says_so():
    nodes = [heavy_node(i) for i in range(4)]
    lay = plan(RowCosts(), nodes)  # a bare source: one memory, as a phone's
    gpu_only = layout_memory(nodes, single("gpu")(nodes, None, Options()))
    mem = layout_memory(nodes, lay)
    assert mem["cpu_bytes"] + mem["gpu_bytes"] <= 1.3 * (gpu_only["cpu_bytes"]
                                                         + gpu_only["gpu_bytes"])
    assert sum(dim == "H" for _, dim, _ in lay.ops.values()) < len(nodes)
    assert any(note.startswith("memory cap:") and "both processors'" in note
               for note in lay.notes)


def test_a_gpu_with_its_own_memory_keeps_its_h_splits():
    nodes = [heavy_node(i) for i in range(4)]
    own = PairCosts(RowCosts(), shared_memory=False)
    lay = plan(own, nodes)
    assert [dim for _, dim, _ in lay.ops.values()] == ["H"] * len(nodes)
    assert not lay.notes
    gpu_only = single("gpu")(nodes, None, Options())
    # what the cap counts: the GPU's bytes, which an H split never grows
    assert capped_bytes(nodes, lay, False) <= capped_bytes(nodes, gpu_only, False)
    assert capped_bytes(nodes, lay, True) > 1.3 * capped_bytes(nodes, gpu_only, True)


def test_the_flag_travels_through_every_wrapper():
    own = PairCosts(RowCosts(), shared_memory=False)
    assert own.in_model(1 << 20).shared_memory is False
    assert ScaledCosts(own, 1.25).shared_memory is False
    assert ScaledCosts(own, 1.25).in_model(1 << 20).shared_memory is False
    assert as_source(RowCosts()).shared_memory is True
    assert "the GPU's own memory" in own.label


@pytest.mark.parametrize("pair, shared", [
    ('{"cpu": {"kind": "llvm", "mcpu": "sapphirerapids"}, "gpu": {"kind": "cuda", '
     '"arch": "sm_90"}}', False),
    ('{"cpu": {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}, "gpu": {"kind": "cuda", '
     '"arch": "sm_87"}, "shared_memory": true}', True),  # a Jetson says so
    ('{"cpu": {"kind": "llvm", "mcpu": "x86-64"}, "gpu": {"kind": "opencl"}}', True),
    ('{"cpu": {"kind": "llvm", "mcpu": "x86-64"}, "gpu": {"kind": "opencl"}, '
     '"shared_memory": false}', False),  # a discrete card through OpenCL
    ("cpu-pair", True),
])
def test_for_pair_gives_the_costs_the_pairs_memory(pair, shared):
    p = DevicePair.parse(pair, arch="sm_90")
    assert p.shares_memory is shared
    assert as_source(for_pair(RowCosts(), p)).shared_memory is shared  # as the search reads it
    assert DevicePair.from_json(json.loads(json.dumps(p.to_json()))) == p


def test_a_bad_shared_memory_value_is_refused():
    with pytest.raises(ValueError, match="shared_memory"):
        DevicePair.parse('{"cpu": {"kind": "llvm"}, "gpu": {"kind": "cuda", "arch": "sm_90"}, '
                         '"shared_memory": "yes"}')


def test_the_cli_takes_a_ratio_or_off():
    from codl_tvm.commands.plan import memory_cap

    assert memory_cap("1.5") == 1.5 and memory_cap("off") is None
    for bad in ("0.9", "x", "nan"):
        with pytest.raises(ValueError, match="at least 1"):
            memory_cap(bad)


def test_a_plan_kept_on_one_processor_says_why():
    nodes = [heavy_node(i) for i in range(2)]
    lay = STRATEGIES["codl"].fn(nodes, Evaluator(RowCosts()), Options(min_plan_gain=0.99))
    assert {place for place, _, _ in lay.ops.values()} == {"gpu"}
    assert any("GPU-only runs" in note for note in lay.notes)


def test_the_plan_file_keeps_the_notes_and_explain_prints_them(tmp_path):
    import codl_tvm
    from codl_tvm import zoo
    from codl_tvm.explain import explain
    from codl_tvm.plan import Plan, PlanError
    from codl_tvm.planner.bench import plan_key
    from codl_tvm.planner.costs import AnalyticCosts

    mod = codl_tvm.load_model(zoo.get("tiny-cnn"))
    plan = Plan.uniform(mod, "H", 0.5)
    plain = plan_key(plan)
    plan.notes = ["memory cap: 1 H split(s) (conv2d_0) made OC splits or whole ops"]
    plan.save(tmp_path / "p.json")
    back = Plan.load(tmp_path / "p.json")
    assert back.notes == plan.notes
    assert plan_key(back) == plain  # the notes say why; they are not what the plan places
    assert explain(mod, back, AnalyticCosts.placeholder()).notes[0] == plan.notes[0]
    doc = back.to_json() | {"notes": "not a list"}
    with pytest.raises(PlanError, match="notes"):
        Plan.from_json(doc)
