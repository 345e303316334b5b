"""``codl-tvm demo``: partition a small CNN, check it against the unsplit model, show the plan."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from .device import DevicePair
from .executable import compile
from .explain import format_table, plan_rows
from .frontend import load_model
from .plan import Plan

CPU_PAIR_NOTE = ("(on the cpu-pair both roles are this CPU, so a split only adds work; "
                 "`codl-tvm bench` on a real CPU+GPU pair says what co-execution gains)")


@dataclass
class DemoReport:
    pair: str
    rel_error: float
    unsplit_ms: float
    split_ms: float
    table: str

    def render(self) -> str:
        verdict = "OK" if self.rel_error <= 1e-5 else "MISMATCH"
        return "\n".join([
            f"device pair: {self.pair}",
            self.table,
            "",
            f"partitioned vs unsplit (whole model on the GPU role): relative error "
            f"{self.rel_error:.2e} [{verdict}]",
            f"median latency: unsplit {self.unsplit_ms:.3f} ms, partitioned {self.split_ms:.3f} ms",
            *([CPU_PAIR_NOTE] if self.pair.startswith("cpu-pair") else []),
        ])


def run_demo(pair_name: str = "auto", dim: str = "H", ratio: float = 0.5, chain: bool = True,
             repeat: int = 10) -> DemoReport:
    """Build the zoo's tiny CNN, split it uniformly, run both versions and compare."""
    from . import zoo

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        pair = DevicePair.parse(pair_name)
    for w in caught:
        print(w.message)  # e.g. auto: no CUDA GPU found, using the cpu-pair
    mod = load_model(zoo.get("tiny-cnn"))
    plan = Plan.uniform(mod, dim, ratio, chain=chain)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the dense layer has one row: stays whole
        split = compile(mod, pair, plan)
    unsplit = compile(mod, pair)
    inputs = split.random_inputs(seed=0)
    (ref,) = unsplit.run(inputs)
    (out,) = split.run(inputs)
    err = float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))
    columns = ["op", "kind", "in", "out", "place", "dim", "ratio", "chain", "gpu", "cpu"]
    table = format_table(plan_rows(mod, plan), columns)
    return DemoReport(str(pair), err, unsplit.time(inputs, repeat) * 1e3,
                      split.time(inputs, repeat) * 1e3, table)
