"""The partition planner: CoDL's hybrid-dimension partitioning and operator chains
(MobiSys'22 sections 4.1-4.2, Algorithm 1), the muLayer and EOP baselines, the oracle, and the
end-to-end benchmark.

>>> from codl_tvm import planner                                   # doctest: +SKIP
>>> costs = planner.predictor_costs("predictor-x86-cuda.json")     # doctest: +SKIP
>>> costs = planner.for_pair(costs, pair)  # as the pair runs splits  # doctest: +SKIP
>>> result = planner.make_plan(mod, "codl", costs)                 # doctest: +SKIP
>>> result.plan.save("plan.json"); result.predicted_us             # doctest: +SKIP

Submodules that import TVM's compiler are loaded on first use, so ``codl_tvm.planner.search``
and ``codl_tvm.planner.timing`` stay importable next to a runtime-only TVM.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "make_plan": "api", "estimate": "api", "ideal": "api", "to_plan": "api", "from_plan": "api",
    "predictor_costs": "api", "measured_costs": "api", "resolve_costs": "api", "for_pair": "api",
    "oracle_jobs": "api", "PlanResult": "api", "build_graph": "opgraph", "ModelGraph": "opgraph",
    "STRATEGIES": "strategies", "Options": "strategies", "PredictorCosts": "costs",
    "MeasuredCosts": "costs", "AnalyticCosts": "costs", "CostSource": "costs",
    "SerialCosts": "costs", "OverlappedCosts": "costs", "BlockCopyCosts": "costs",
}  # fmt: skip

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
