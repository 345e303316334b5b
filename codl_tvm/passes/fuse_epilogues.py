"""FuseEpilogues: every kernel's elementwise successors run inside it.

After ``LegalizeOps`` each Relax op is its own kernel: a conv, then its bias add, then its
activation (ONNX ``Clip`` even imports as two kernels, ``maximum`` and ``minimum``). Each of
those extra kernels reads and writes the whole tensor again and costs a VM call and a launch:
75 us per YOLO-V2 layer on an 8-SM GPU, 70 launches in MobileNet-V2.

This pass runs TVM's own ``FuseOps`` / ``FuseTIR`` on a restricted set of op patterns:
elementwise and broadcast kernels fuse into the conv or matmul before them
(:data:`EPILOGUE_KINDS`) and into each other. Every other kernel (slices, concats, pads,
reshapes, transposes, pools, reductions) is marked opaque and stays alone, and so nothing
fuses *into* a conv as a prologue. That keeps what the later passes and the planner rely on:

* the split's own kernels (``strided_slice``, ``concatenate``) keep their names and
  signatures (:class:`WriteSplitOutputsInPlace` finds the concat by name);
* a fused kernel is an anchor plus injective epilogue blocks, which the schedules read
  (``schedules.analysis``: "one reduction block, then injective epilogue blocks");
* nothing fuses across devices: a cross-device value passes through ``to_vdevice``, which
  is not a kernel.

Run it right after ``LegalizeOps`` and before :class:`BindKernelTargets` (which gives the fused
kernels their device's target).
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.relax import transform as rt

from ..schedules.analysis import analyze

# TVM's OpPatternKind values (include/tvm/relax/op_attr_types.h)
ELEMWISE, BROADCAST, OUT_EWISE_FUSABLE, OPAQUE = 0, 1, 4, 8

# patterns that keep their meaning; every other kernel becomes opaque
FUSABLE_PATTERNS = frozenset({ELEMWISE, BROADCAST, OUT_EWISE_FUSABLE})

# the kernels (schedules.analysis kinds) that take an epilogue: those the dispatch table
# schedules with one. TVM also lets means, variances, softmax and pools take one, but a
# broadcast epilogue after a reduction (an instance norm's x - mean) makes the kernel loop
# over the whole input per output channel: 10x slower fast-style-transfer on an H200
EPILOGUE_KINDS = frozenset({"conv2d", "depthwise_conv2d", "group_conv2d", "conv2d_transpose",
                            "matmul"})


def _pattern(func: tirx.PrimFunc) -> int:
    """``func``'s pattern as this pass uses it: TVM's, with shape-changing "elementwise"
    kernels (TVM calls ``strided_slice`` elementwise: its index map is affine) opaque."""
    attrs = func.attrs or {}
    pattern = int(attrs["op_pattern"]) if "op_pattern" in attrs else OPAQUE
    if pattern not in FUSABLE_PATTERNS:
        return OPAQUE
    if pattern in (ELEMWISE, BROADCAST):
        shapes = [_ints(getattr(p, "shape", None)) for p in func.params]
        if shapes[-1] is None or shapes[-1] not in shapes[:-1]:
            return OPAQUE  # its output has the shape of none of its inputs
    elif analyze(func).kind not in EPILOGUE_KINDS:
        return OPAQUE
    return pattern


def _ints(shape: object) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        return None  # a scalar parameter or a symbolic shape


def _restrict(mod: tvm.IRModule) -> tvm.IRModule:
    """Every PrimFunc marked with :func:`_pattern`."""
    updates = {
        gvar: func.with_attr("op_pattern", _pattern(func))
        for gvar, func in mod.functions.items() if isinstance(func, tirx.PrimFunc)
    }
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod


def fusable_kernels(mod: tvm.IRModule) -> set[str]:
    """Names of the PrimFuncs of ``mod`` that this pass fuses into the kernel before them
    (elementwise and broadcast ones); the planner prices those as free."""
    mod = rt.AnnotateTIROpPattern()(mod)
    return {
        gvar.name_hint for gvar, func in mod.functions.items()
        if isinstance(func, tirx.PrimFunc) and _pattern(func) in (ELEMWISE, BROADCAST)
    }


@tvm.transform.module_pass(opt_level=0, name="FuseEpilogues")
class FuseEpilogues:
    """Fuse elementwise and broadcast kernels into the conv, matmul or elementwise kernel
    that produces their input; leave every other kernel alone."""

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        mod = rt.AnnotateTIROpPattern()(mod)
        mod = _restrict(mod)
        mod = rt.FuseOps(fuse_opt_level=2)(mod)
        return rt.FuseTIR()(mod)
