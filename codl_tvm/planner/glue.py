"""The ops between the planned ones, priced so a plan's estimate is a whole-model latency.

The planner places anchors (convs, matmuls, pools with their epilogues); everything else in
``main`` (residual adds, activations a clip imports as two kernels, norms, concats, means)
runs where its first input lives (:class:`codl_tvm.passes.CoExecutionPartition`). A kernel of
its own is priced as the predictor's elementwise kernel over the tensor it streams, which
carries the VM's dispatch too (every profiled sample is one VM call). Views (reshapes) cost
nothing, and neither does an elementwise op that :class:`codl_tvm.passes.FuseEpilogues` runs
inside the kernel before it (``GlueOp.into``). No TVM import: build_graph collects the ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..predictor.opspec import OpSpec

# how an op outside the plan is priced, by Relax op name (anything else: "output")
#   view: no kernel (the VM makes a view); input: reads more than it writes (reductions);
#   elementwise: priced on its output, and fused into the kernel before it where it can be
#   (a kernel the importer wrote, relax.call_tir, is elementwise where its PrimFunc is)
ELEMENTWISE = "elementwise"
GLUE_RULES: dict[str, str] = {
    **{f"relax.{name}": ELEMENTWISE for name in (
        "add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "clip",
        "nn.relu", "nn.leakyrelu", "nn.gelu", "nn.silu", "sigmoid", "tanh", "exp", "sqrt",
        "rsqrt", "erf", "negative", "abs")},
    "relax.reshape": "view",
    "relax.flatten": "view",
    "relax.squeeze": "view",
    "relax.expand_dims": "view",
    "relax.to_vdevice": "view",
    "relax.hint_on_device": "view",
    "relax.mean": "input",
    "relax.variance": "input",
    "relax.sum": "input",
    "relax.max": "input",
    "relax.min": "input",
    "relax.nn.softmax": "input",
    "relax.nn.layer_norm": "input",
    "relax.nn.group_norm": "input",
    "relax.nn.instance_norm": "input",
}


@dataclass(frozen=True)
class GlueOp:
    """One op outside the plan.

    Attributes
    ----------
    op : str
        Relax op name (``relax.call_tir`` for a kernel the importer wrote itself).
    shape : tuple of int
        The tensor its kernel streams (its output, or its input for a reduction).
    source : str or None
        The planned op whose output its first input derives from (it runs on that op's
        device); None: a model input (it runs where the inputs live).
    into : str or None
        The kernel it is fused into (an elementwise op reading a value nobody else reads):
        a planned op's id (fused unless that op is split, whose parts end in a concat), or
        ``""`` for the op outside the plan before it (always fused); None: its own kernel.
    """

    op: str
    shape: tuple[int, ...]
    source: str | None
    into: str | None = None

    def fused(self, split_ops: set[str] | frozenset[str]) -> bool:
        """Whether it runs inside another kernel when the ops in ``split_ops`` are split."""
        return self.into == "" or (self.into is not None and self.into not in split_ops)

    def spec(self) -> OpSpec:
        """The elementwise kernel it is priced as (batch folded into the channels)."""
        if len(self.shape) == 4:
            n, c, h, w = self.shape
            return OpSpec("elementwise", h, w, n * c, n * c)
        size = math.prod(self.shape) or 1
        return OpSpec("elementwise", 1, 1, size, size)

    def to_json(self) -> dict:
        return {"op": self.op, "shape": list(self.shape), "source": self.source,
                "into": self.into}

    @staticmethod
    def from_json(doc: dict) -> GlueOp:
        return GlueOp(doc["op"], tuple(doc["shape"]), doc["source"], doc.get("into"))


def is_elementwise(op: str) -> bool:
    """Whether a Relax op (not ``call_tir``) runs as an elementwise or broadcast kernel."""
    return GLUE_RULES.get(op) == ELEMENTWISE


def priced_shape(op: str, out_shape: list[int], in_shape: list[int] | None) -> list[int] | None:
    """The shape an op outside the plan is priced on; None for views (free)."""
    rule = GLUE_RULES.get(op, "output")
    if rule == "view":
        return None
    if rule == "input" and in_shape:
        return in_shape
    return out_shape
