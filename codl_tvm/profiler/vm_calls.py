"""Every call of a Relax VM run, timed through the VM's instrument (runtime-only TVM)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np


def vm_calls(vm: Any, run: Callable[[], Any], runs: int = 20) -> dict[str, dict[str, Any]]:
    """Microseconds and calls per run of each function ``vm`` calls while ``run()`` runs it
    ``runs`` times (kernels and the VM's builtins), with the shapes of each one's first call's
    arguments.

    Parameters
    ----------
    vm : tvm.runtime.vm.VirtualMachine
        The VM that ``run`` calls; its instrument is set for the runs and cleared after.
    run : callable
        One run of the model.
    runs : int
        Runs to average over.

    Returns
    -------
    dict
        ``{name: {"us": float, "median_us": float, "calls": int, "shapes": [[int, ...],
        ...]}}``: the mean and the median over the runs of its time in a run (the median
        ignores the runs an interrupt slowed); the instrument adds a few microseconds to each
        call.
    """
    spent: dict[str, float] = defaultdict(float)
    per_run: list[dict[str, float]] = []
    calls: dict[str, int] = defaultdict(int)
    started: dict[str, float] = {}
    shapes: dict[str, list] = {}

    def instrument(_func, name, before, _ret, *args):
        if before:
            shapes.setdefault(name, [list(a.shape) for a in args if hasattr(a, "shape")])
            started[name] = time.perf_counter()
        else:
            took = time.perf_counter() - started[name]
            spent[name] += took
            per_run[-1][name] = per_run[-1].get(name, 0.0) + took
            calls[name] += 1
        return 0

    vm.set_instrument(instrument)
    try:
        for _ in range(runs):
            per_run.append({})
            run()
    finally:
        vm.set_instrument(None)
    return {n: {"us": 1e6 * s / runs,
                "median_us": 1e6 * float(np.median([r.get(n, 0.0) for r in per_run])),
                "calls": calls[n] // runs, "shapes": shapes[n]}
            for n, s in spent.items()}
