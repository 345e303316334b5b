"""IssueGpuWorkFirst: the host issues the GPU's work before it computes on the CPU.

The Relax VM runs a function's bindings in order. A GPU kernel launch or a copy returns at
once, a CPU kernel holds the host until it is done, so whatever the GPU could do while the
CPU computes must be issued first. ``CoExecutionPartition`` orders each split op that way;
across ops nothing did, so parallel branches placed whole on the two processors (an
inception block's towers, a residual block's shortcut conv) ran one after the other: the
GPU's branch waited for the host to finish the CPU's.

This pass reorders each dataflow block by a stable list schedule over its data dependences.
Of the bindings whose inputs are ready it takes, in this order and each time the earliest in
the original order:

1. copies to the CPU (they feed the host's next work; on an in-order GPU queue a copy waits
   for every kernel issued before it);
2. everything else that does not compute on the CPU: GPU kernels, copies to the GPU, shape
   and tuple bindings;
3. CPU computations.

A model whose ops form one chain has a single ready binding at each step and keeps its
order; so does every pair whose two roles are CPUs (the cpu-pair: there is nothing to run
beside the host). Run it after :class:`BindKernelTargets`, when every kernel is on its
device.
"""

from __future__ import annotations

import heapq

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .bind_kernel_targets import type_vdevice

TO_VDEVICE = tvm.ir.Op.get("relax.to_vdevice")
TO_HOST, ASYNC, HOST = 0, 1, 2  # the classes, in the order they are taken
HOST_KIND = "llvm"


def _on_host(ty: relax.Type | None) -> bool:
    vdev = type_vdevice(ty)
    return vdev is not None and vdev.target.kind.name == HOST_KIND


def binding_class(binding: relax.Binding) -> int:
    """:data:`TO_HOST`, :data:`ASYNC` or :data:`HOST`: how the host runs ``binding``."""
    value = binding.value
    on_host = _on_host(getattr(binding.var, "ty", None))
    if isinstance(value, relax.Call) and value.op.same_as(TO_VDEVICE):
        return TO_HOST if on_host else ASYNC
    return HOST if on_host else ASYNC


def issue_order(bindings: list[relax.Binding]) -> list[relax.Binding]:
    """``bindings`` in the order the pass issues them (see the module's docstring)."""
    index = {b.var: i for i, b in enumerate(bindings)}
    succ: list[list[int]] = [[] for _ in bindings]
    waiting = [0] * len(bindings)
    for i, b in enumerate(bindings):
        for j in {index[v] for v in relax.analysis.free_vars(b.value) if v in index}:
            succ[j].append(i)
            waiting[i] += 1
    cls = [binding_class(b) for b in bindings]
    ready: tuple[list[int], ...] = ([], [], [])
    for i, w in enumerate(waiting):
        if not w:
            heapq.heappush(ready[cls[i]], i)
    out = []
    while len(out) < len(bindings):
        i = heapq.heappop(next(q for q in ready if q))
        out.append(bindings[i])
        for k in succ[i]:
            waiting[k] -= 1
            if not waiting[k]:
                heapq.heappush(ready[cls[k]], k)
    return out


@mutator
class _Reorder(PyExprMutator):
    def visit_dataflow_block_(self, block: relax.DataflowBlock) -> relax.BindingBlock:
        return super().visit_dataflow_block_(relax.DataflowBlock(issue_order(list(
            block.bindings))))


@tvm.transform.module_pass(opt_level=0, name="IssueGpuWorkFirst")
class IssueGpuWorkFirst:
    """Reorder dataflow blocks so that GPU work and copies are issued before CPU work."""

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        vdevices = list(mod.global_infos.get("vdevice", []))
        if all(v.target.kind.name == HOST_KIND for v in vdevices):
            return mod  # no device beside the host: nothing runs while the host computes
        mutator_ = _Reorder(mod)
        for gvar, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                mutator_.builder_.update_func(gvar, mutator_.visit_expr(func))
        return mutator_.builder_.get()
