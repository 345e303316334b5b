"""WriteSplitOutputsInPlace: a split whose parts are contiguous blocks of its output needs no
``concat`` kernel.

After :class:`StageCrossDeviceCopies`, a split op ends with the GPU part written by a kernel,
the CPU part uploaded by a copy, and a ``concatenate`` kernel that writes both into the output
again. Where every dimension before the concatenated axis is 1 (an output-channel split of a
batch-1 NCHW tensor, or a row split of a one-channel one), the two parts are two contiguous
byte ranges of the output. This pass, run on the lowered VM code, then allocates the output
first, lets the GPU kernel write into a view of its head (offset 0, which TVM kernels accept)
and the upload copy into a view of its tail (copies honour a byte offset), and drops the
``concatenate`` kernel: the output is written once, by the kernel and the copy engine.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .stage_cross_device_copies import (
    ALLOC_TENSOR,
    COPY,
    KILL,
    VIEW,
    bindings_of,
    is_extern,
    is_op,
    own_storage,
    tensor_bytes,
    with_main,
)


def _shape(alloc: relax.Call) -> list[int]:
    return [int(d) for d in alloc.args[2].values]


def _view(base: relax.Var, alloc: relax.Call, offset_bytes: int) -> relax.Call:
    ty = relax.TensorType(alloc.args[2], alloc.args[3].value)
    args = [base, alloc.args[2], alloc.args[3], relax.prim_value(offset_bytes)]
    return relax.Call(relax.ExternFunc(VIEW), args, ty_args=[ty])


class _InPlace:
    def __init__(self, func: relax.Function):
        self.bindings, self.defs, self.uses = bindings_of(func)

    def _concat_parts(self, b: relax.Binding) -> tuple[relax.Var, relax.Var, relax.Var] | None:
        """(head, tail, out) of a two-part concatenate kernel over contiguous blocks."""
        v = b.value
        if not (isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.GlobalVar)
                and v.op.name_hint.startswith("concatenate") and len(v.args) == 3):
            return None
        head, tail, out = v.args
        allocs = [self.defs.get(x) for x in (head, tail, out)]
        if not all(is_op(a, ALLOC_TENSOR) for a in allocs):
            return None
        shapes = [_shape(a) for a in allocs]
        axes = [i for i, (p, q) in enumerate(zip(shapes[0], shapes[2])) if p != q]
        if len(axes) != 1 or any(d != 1 for d in shapes[2][: axes[0]]):
            return None
        # the tail is written only by one copy (a kernel would reject a view's byte offset)
        writers = [u for u in self.uses.get(tail, []) if not is_op(u.value, KILL)
                   and not u.var.same_as(b.var)]
        if len(writers) != 1 or not is_extern(writers[0].value, COPY) or not (
                writers[0].value.args[1].same_as(tail)):
            return None
        return head, tail, out

    def rewrite(self) -> list[relax.Binding] | None:
        found = {b.var: p for b in self.bindings if (p := self._concat_parts(b)) is not None}
        if not found:
            return None
        drop: set[relax.Var] = set()  # bindings removed (by their var)
        before: dict[relax.Var, list[relax.Binding]] = {}  # out's allocation moves here
        replace: dict[relax.Var, relax.Expr] = {}
        for head, tail, out in found.values():
            out_alloc = self.defs[out]
            storage = out_alloc.args[0]
            kills = [u for u in self.uses.get(storage, []) if is_op(u.value, KILL)]
            moved = [b for b in self.bindings if b.var in (storage, out)] + kills
            drop.update(b.var for b in moved)
            before[head] = moved
            head_alloc = self.defs[head]
            replace[head] = _view(out, head_alloc, 0)
            nbytes = tensor_bytes(_shape(head_alloc), str(head_alloc.args[3].value))
            replace[tail] = _view(out, self.defs[tail], nbytes)
            drop.update(own_storage(head, self.defs, self.uses)
                        + own_storage(tail, self.defs, self.uses))
        out_bindings: list[relax.Binding] = []
        for b in self.bindings:
            if b.var in before:
                out_bindings += before[b.var]
            if b.var in replace:
                out_bindings.append(relax.VarBinding(b.var, replace[b.var]))
            elif b.var not in drop and b.var not in found:
                out_bindings.append(b)
        return out_bindings



@tvm.transform.module_pass(opt_level=0, name="WriteSplitOutputsInPlace")
class WriteSplitOutputsInPlace:
    """Drop ``concatenate`` kernels whose parts are contiguous blocks (see the module doc)."""

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        func = mod["main"]
        if not isinstance(func.body, relax.SeqExpr):
            return mod
        bindings = _InPlace(func).rewrite()
        return mod if bindings is None else with_main(mod, bindings)
