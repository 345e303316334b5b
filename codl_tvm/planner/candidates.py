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

A predictor also misjudges small parts: a CPU part of a few rows or channels fills its tiles
and tasks poorly (``benchmarks/COEXEC.md``: 0.9-4x its share of the whole op), and a plan of
many splits that give the CPU 5-15% of an op can lose where each looked like a small gain
(ResNet-18 at 8 SMs: 18 such splits predicted 2.42 ms ran 3.18 ms, GPU-only 2.86). So one more
candidate is planned with the shares on a :data:`COARSE_STEP` grid: fewer splits, each giving
the CPU at least a quarter.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..predictor.opspec import OpSpec
from ..predictor.split_sharing import SplitSharing, SplitUnit
from .api import PlanResult, make_plan
from .bench import plan_key
from .cost_source import FLAGS, CostSourceBase, as_source
from .opgraph import ModelGraph
from .strategies import ORACLE_STEP, Options

# the CPU's kernel times are scaled by these (1.25^k: steps the guard's timing resolves),
# besides the predictor's own ratio
CPU_SCALES = (0.8, 1.25, 1.5625)
COARSE_STEP = ORACLE_STEP  # the coarse candidate's grid of shares: the oracle's


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


def coarse_label(step: float) -> str:
    """The coarse candidate's label: ``step-0.25``."""
    return f"step-{step:g}"


def with_candidates(result: PlanResult, mg: ModelGraph, costs: Any, strategy: str = "codl",
                    cpu_scales: tuple[float, ...] = CPU_SCALES,
                    options: Options | None = None,
                    coarse_step: float | None = COARSE_STEP) -> dict[str, PlanResult]:
    """Plan ``mg`` with ``strategy`` (and ``options``) on ``costs`` scaled by each of
    ``cpu_scales``, and on ``costs`` with the shares on a ``coarse_step`` grid (None: not;
    nor where ``options`` plans on that grid already), and add to ``result.plan.candidates``
    each plan that uses both processors and differs from the plan and from the candidates
    before it. Returns the candidates' results by label (their ``predicted_us`` on the
    scaled costs)."""
    opts = options or Options()
    runs = [(label(s), ScaledCosts(costs, s), opts) for s in cpu_scales]
    if coarse_step is not None and coarse_step > opts.step:
        runs.append((coarse_label(coarse_step), costs, replace(opts, step=coarse_step)))
    seen = {plan_key(result.plan)}
    added: dict[str, PlanResult] = {}
    for name, run_costs, run_opts in runs:
        res = make_plan(mg, strategy, run_costs, run_opts)
        key = plan_key(res.plan)
        if res.plan.single_device() is None and key not in seen:
            seen.add(key)
            result.plan.candidates[name] = res.plan
            added[name] = res
    return added
