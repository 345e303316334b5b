"""One op alone as a Relax module, compiled and timed on a pair: what
:class:`~codl_tvm.planner.costs.MeasuredCosts` measures on a pair and ``explain --measure``
shows (kept out of the planner, which imports no TVM)."""

from __future__ import annotations

import tvm

from .graph import entry_function, find_anchors
from .plan import Plan
from .predictor.opspec import OpSpec


def time_single_op(pair, spec: OpSpec, how: tuple, repeat: int = 10) -> float:
    """Microseconds ``spec`` takes compiled alone on ``pair`` with :func:`codl_tvm.compile`
    (median of ``repeat``), placed as ``how`` says: ``("single", role)``, ``("cpu-op", ...)``
    (on the CPU, input and output on the GPU) or ``("split", dim, ratio)``. What
    :class:`~codl_tvm.planner.costs.MeasuredCosts` times on a pair."""
    from .executable import compile
    from .plan import OpPlacement

    mod = single_op_module(spec)
    op_id = find_anchors(entry_function(mod))[0].op_id
    plan = {
        "single": lambda: Plan.single(mod, how[-1]),
        "cpu-op": lambda: Plan({op_id: OpPlacement("cpu")}),
        "split": lambda: Plan({op_id: OpPlacement("split", how[1], how[2])}),
    }[how[0]]()
    exe = compile(mod, pair, plan)
    return exe.time(exe.random_inputs(0), repeat=repeat) * 1e6


def single_op_module(spec: OpSpec, seed: int = 0) -> tvm.IRModule:
    """A Relax module computing just ``spec`` (random weights as constants), prepared."""
    import numpy as np
    from tvm import relax
    from tvm.relax import op as rop

    from .frontend import load_model

    rng = np.random.default_rng(seed)

    def const(shape: tuple[int, ...]) -> relax.Expr:
        return relax.const(rng.standard_normal(shape).astype("float32"))

    x_shape = (1, spec.IC) if spec.kind == "dense" else (1, spec.IC, spec.H, spec.W)
    dil = (spec.dilation, spec.dilation)
    exprs = {
        "dense": lambda x: rop.matmul(x, const((spec.IC, spec.OC))),
        "conv2d": lambda x: rop.nn.conv2d(
            x, const((spec.OC, spec.IC // spec.groups, spec.KH, spec.KW)),
            strides=(spec.SH, spec.SW), padding=spec.pad, dilation=dil, groups=spec.groups),
        "pool_max": lambda x: rop.nn.max_pool2d(x, (spec.KH, spec.KW), (spec.SH, spec.SW),
                                                spec.pad, dil),
        "pool_avg": lambda x: rop.nn.avg_pool2d(x, (spec.KH, spec.KW), (spec.SH, spec.SW),
                                                spec.pad, dil),
    }  # fmt: skip
    exprs["depthwise"] = exprs["conv2d"]
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(exprs[spec.kind](x))
        bb.emit_func_output(out)
    return load_model(bb.get())
