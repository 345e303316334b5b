"""Fast sub-operator kernels for the CPU (llvm) and GPU (cuda/opencl) with known blocking.

``ApplySchedules()`` is the module pass; ``Blocking``/``blocking_of`` expose each kernel's
blocking (CoDL Eq. 3) to the predictor; ``RULES`` is the dispatch table.
"""

from __future__ import annotations

from .apply import ApplySchedules
from .blocking import ATTR_KEY, Blocking, blocking_of
from .dispatch import RULES, Rule, schedule_func

__all__ = ["ATTR_KEY", "ApplySchedules", "Blocking", "RULES", "Rule", "blocking_of",
           "schedule_func"]
