"""Candidate plans: the same strategy planned for other relative speeds of the two processors.

A predictor fitted on one machine misjudges another's CPU against its GPU, and a plan is only
as good as that ratio: on the GPU machine's instances the CPU ran a whole model 0.8-1.4x as
long, relative to the GPU, as predicted (``benchmarks/BENCH.md``, predicted against measured
single-processor latencies). Splits then give the CPU too many rows or too few. Rather than
trust one ratio, the planner also plans with the CPU's kernels :data:`CPU_SCALES` times as
long and keeps the distinct plans as :attr:`codl_tvm.Plan.candidates`; a guarded build
(``compile(..., guard=True)``) holds them all, and the runtime times them where it loads the
artifact and runs the fastest (:func:`codl_tvm.runtime.fastest`), so the ratio is measured on
the machine at hand, not assumed.
"""

from __future__ import annotations

from typing import Any

from ..predictor.opspec import OpSpec
from ..predictor.split_sharing import SplitSharing, SplitUnit
from .api import PlanResult, make_plan
from .bench import plan_key
from .cost_source import FLAGS, CostSourceBase, as_source
from .opgraph import ModelGraph
from .strategies import Options

# the CPU's kernel times are scaled by these (1.25^k: steps the guard's timing resolves),
# besides the predictor's own ratio
CPU_SCALES = (0.8, 1.25, 1.5625)


class ScaledCosts(CostSourceBase):
    """``costs`` with every CPU kernel ``cpu_scale`` times as long; copies and the GPU's
    kernels as they are, and every flag of ``costs`` (it wraps a pair's costs as they are)."""

    def __init__(self, costs: Any, cpu_scale: float) -> None:
        if not cpu_scale > 0:
            raise ValueError(f"cpu_scale must be positive, got {cpu_scale!r}")
        self.costs, self.cpu_scale = as_source(costs), float(cpu_scale)
        self.label = f"{self.costs.label}, CPU kernels x{self.cpu_scale:g}"
        for flag in FLAGS:
            setattr(self, flag, getattr(self.costs, flag))

    def kernel_us(self, role: str, sub: OpSpec) -> float:
        us = self.costs.kernel_us(role, sub)
        return us * self.cpu_scale if role == "cpu" else us

    def transposed_conv_us(self, role: str, sub: OpSpec) -> float:
        us = self.costs.transposed_conv_us(role, sub)
        return us * self.cpu_scale if role == "cpu" else us

    def sharing_us(self, op: str, role: str, nbytes: float) -> float:
        return self.costs.sharing_us(op, role, nbytes)

    def in_model(self, footprint_bytes: int) -> ScaledCosts:
        return ScaledCosts(self.costs.in_model(footprint_bytes), self.cpu_scale)

    def in_range(self, sub: OpSpec) -> bool:
        return self.costs.in_range(sub)

    def move_us(self, spec: OpSpec, direction: str) -> float:
        return self.costs.move_us(spec, direction)

    def split_sharing(self, unit: SplitUnit) -> SplitSharing:
        return self.costs.split_sharing(unit)


def label(cpu_scale: float) -> str:
    """A candidate's label: ``cpu-x1.25``."""
    return f"cpu-x{cpu_scale:g}"


def with_candidates(result: PlanResult, mg: ModelGraph, costs: Any, strategy: str = "codl",
                    cpu_scales: tuple[float, ...] = CPU_SCALES,
                    options: Options | None = None) -> dict[str, PlanResult]:
    """Plan ``mg`` with ``strategy`` (and ``options``) on ``costs`` scaled by each of
    ``cpu_scales``, and add to ``result.plan.candidates`` each plan that uses both processors
    and differs from the plan and from the candidates before it. Returns the candidates'
    results by label (their ``predicted_us`` on the scaled costs)."""
    seen = {plan_key(result.plan)}
    added: dict[str, PlanResult] = {}
    for scale in cpu_scales:
        res = make_plan(mg, strategy, ScaledCosts(costs, scale), options)
        key = plan_key(res.plan)
        if res.plan.single_device() is None and key not in seen:
            seen.add(key)
            result.plan.candidates[label(scale)] = res.plan
            added[label(scale)] = res
    return added
