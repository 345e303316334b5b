"""OverlapCopies: a split's copies run beside its kernels, not behind them.

TVM issues kernels and copies on one CUDA stream, so each copy waits for every kernel queued
before it, and :class:`StageCrossDeviceCopies` must then wait for the whole stream before a
CPU kernel reads the rows it copied: the GPU part of a split starts only when the CPU part
does, and the CPU's rows go back only after the GPU part is done. This pass, run on the
lowered VM code after the staging passes, puts kernels on a stream of their own and orders
the two streams with events (:mod:`codl_tvm.streams`), so a split op runs as

- kernels: slice of the CPU's rows; slice of the GPU's rows; GPU part; ... concat;
- copies: rows to the host (right after their slice) ...... rows back (when the CPU is done);
- host: waits for the rows to the host, runs the CPU part, issues the copy back.

Rules, each a wait the one-stream code got for free:

- a copy from the GPU goes right after the kernel that writes its source and waits for the
  kernels before it (``COPIES_WAIT``);
- the host waits for it (``HOST_WAITS``) right before the next binding that is not a GPU
  kernel launch, an allocation, a view or another such copy; the GPU tensors freed in
  between are freed after that wait, so the pool cannot hand their memory to a kernel while
  a copy still reads it;
- a copy to the GPU lands in a buffer of its own (a GPU staging parameter, made once by the
  runner), so it cannot overwrite memory that a kernel still in flight reads; where it lands
  in a pooled tensor (the tail of an in-place split output), it first waits for the kernels
  if any tensor was freed between the last such wait and that tensor's allocation;
- kernels after a copy to the GPU wait for it (``KERNELS_WAIT``);
- ``vm.builtin.to_device`` (the copies left unstaged) waits for the kernels before it, and
  kernels after it wait for it; so does a copy whose devices the pass cannot tell, and the
  host waits for it at once;
- ``main`` starts with ``BEGIN`` and ends with ``END``.

A 2-D copy (``COPY_BLOCK``, :class:`LowerSlicesToBlockCopies`) between the devices follows the
same rules as a copy; one within the GPU runs on the kernel stream, as the kernel it replaced.

The stream functions take a GPU tensor of ``main`` (its first GPU parameter) to name the
device. On devices without streams they do nothing, so the pass can run, and be checked, on
the CPU pair.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .. import streams
from ..device import ROLES, vdevice_index
from .stage_cross_device_copies import (
    ALLOC_TENSOR,
    COPY,
    KILL,
    RESHAPE,
    STAGING_ATTR,
    TO_DEVICE,
    VIEW,
    is_extern,
    is_op,
    tensor_role,
    with_main,
)

ALLOC_STORAGE = tvm.ir.Op.get("relax.vm.alloc_storage")
# calls the host issues without touching data: they may run while a copy to the host flies
_ASYNC_EXTERNS = (VIEW, streams.COPIES_WAIT, streams.KERNELS_WAIT)


def _call(symbol: str, ref: relax.Var) -> relax.VarBinding:
    call = relax.Call(relax.ExternFunc(symbol), [ref], ty_args=[relax.TupleType([])])
    return relax.VarBinding(relax.Var("_", relax.TupleType([])), call)


def _is_sync(value: relax.Expr, sync_views: set[relax.Var]) -> bool:
    """A :class:`StageCrossDeviceCopies` sync: ``to_device`` of a one-element view."""
    return is_extern(value, TO_DEVICE) and value.args[0] in sync_views


class _Overlap:
    """Rewrites the bindings of one lowered ``main``; ``new_params`` are its landing buffers."""

    def __init__(self, mod: tvm.IRModule, func: relax.Function, gpu: int, cpu: int):
        self.gpu, self.cpu = gpu, cpu
        self.vdevices = list(mod.global_infos["vdevice"])
        self.bindings = [b for block in func.body.blocks for b in block.bindings]
        self.defs = {b.var: b.value for b in self.bindings}
        self.ref = next((p for p in func.params if self._role(p) == gpu), None)
        self.new_params: list[relax.Var] = []
        self.sync_views = {b.var for b in self.bindings if is_extern(b.value, VIEW)
                           and b.var.name == "codl_sync_view"}

    def _role(self, var: relax.Expr) -> int | None:
        return tensor_role(var, self.defs, self.vdevices)

    def _is_gpu_kernel(self, value: relax.Expr) -> bool:
        """A kernel launch on the GPU: every tensor it reads or writes is on the GPU."""
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar)):
            return False
        roles = {self._role(a) for a in value.args if isinstance(a, relax.Var)}
        return roles == {self.gpu}

    def _within_gpu(self, value: relax.Expr) -> bool:
        """A 2-D copy within the GPU (on the kernel stream, like a kernel)."""
        return (is_extern(value, streams.COPY_BLOCK)
                and {self._role(a) for a in value.args[:2]} == {self.gpu})

    def _quiet(self, value: relax.Expr) -> bool:
        """Issued by the host without reading or writing tensor data on the host."""
        return (self._is_gpu_kernel(value) or self._within_gpu(value)
                or is_op(value, ALLOC_TENSOR)
                or is_op(value, ALLOC_STORAGE) or isinstance(value, relax.Var)
                or any(is_extern(value, s) for s in _ASYNC_EXTERNS))

    def _landing(self, dst: relax.Var) -> relax.Var | None:
        """A GPU staging parameter for an upload into a freshly pooled tensor."""
        alloc = self.defs.get(dst)
        if not is_op(alloc, ALLOC_TENSOR) or self._role(dst) != self.gpu:
            return None
        storage = alloc.args[0]
        if sum(is_op(b.value, ALLOC_TENSOR) and b.value.args[0].same_as(storage)
               for b in self.bindings) != 1:
            return None  # the pooled storage holds other tensors too
        ty = relax.TensorType(alloc.args[2], alloc.args[3].value, self.vdevices[self.gpu])
        var = relax.Var(f"codl_land{len(self.new_params)}", ty)
        self.new_params.append(var)
        return var

    def rewrite(self) -> list[relax.Binding]:
        uploads = {b.value.args[1] for b in self.bindings if _is_copy(b.value)
                   and self._role(b.value.args[0]) == self.cpu
                   and self._role(b.value.args[1]) == self.gpu}
        # a 2-D copy writes part of a tensor that kernels write too: it stays in the pool
        landing = {b.value.args[1]: p for b in self.bindings if is_extern(b.value, COPY)
                   and b.value.args[1] in uploads
                   and (p := self._landing(b.value.args[1])) is not None}
        landing_storage = {self.defs[v].args[0] for v in landing}
        out: list[relax.Binding] = [_call(streams.BEGIN, self.ref)]
        pending = False  # a copy to the host is in flight, the host has not waited
        held: list[relax.Binding] = []  # kills held until the host has waited
        freed = False  # a tensor was freed since the copies last waited for the kernels
        fresh: set[relax.Var] = set()  # storages and tensors allocated after such a free
        for b in self.bindings:
            v = b.value
            if self._dropped(b, landing, landing_storage):
                continue
            if b.var in landing:
                out.append(relax.VarBinding(b.var, landing[b.var]))
                continue
            if pending and not (self._quiet(v) or is_op(v, KILL) or self._is_download(v)):
                out += [_call(streams.HOST_WAITS, self.ref), *held]
                freed = freed or any(self._frees(k.value) for k in held)
                pending, held = False, []
            if is_op(v, KILL):
                if pending:  # takes effect where it is emitted, after the host's wait
                    held.append(b)
                else:
                    out.append(b)
                    freed = freed or self._frees(v)
                continue
            if (is_op(v, ALLOC_STORAGE) and freed) or (
                    (is_op(v, ALLOC_TENSOR) or is_extern(v, VIEW)) and v.args[0] in fresh):
                fresh.add(b.var)
            if self._is_download(v):
                at = _after_last_mention(out, self._same_memory(v.args[0]))
                out[at:at] = [_call(streams.COPIES_WAIT, self.ref), b]
                pending = True
                freed = any(is_op(o.value, KILL) and self._frees(o.value) for o in out[at + 2:])
            elif self._within_gpu(v):
                out.append(b)
            elif _is_copy(v) and v.args[1] in uploads:
                if v.args[1] in fresh:
                    out.append(_call(streams.COPIES_WAIT, self.ref))
                    freed = False
                out += [b, _call(streams.KERNELS_WAIT, self.ref)]
            elif _is_copy(v):  # devices unknown here: ordered every way
                out += [_call(streams.COPIES_WAIT, self.ref), b,
                        _call(streams.HOST_WAITS, self.ref),
                        _call(streams.KERNELS_WAIT, self.ref)]
                freed = False
            elif is_extern(v, TO_DEVICE):
                out += [_call(streams.COPIES_WAIT, self.ref), b]
                freed = False
                if vdevice_index(self.vdevices, v.attrs.dst_vdevice) != self.cpu:
                    out.append(_call(streams.KERNELS_WAIT, self.ref))
            else:
                out.append(b)
        if pending:
            out += [_call(streams.HOST_WAITS, self.ref), *held]
        return [*out, _call(streams.END, self.ref)]

    def _dropped(self, b: relax.Binding, landing: dict, landing_storage: set) -> bool:
        """The one-stream syncs, and the pooled allocation (and kills) of landed uploads."""
        v = b.value
        if b.var in self.sync_views or _is_sync(v, self.sync_views) or b.var in landing_storage:
            return True
        return is_op(v, KILL) and (v.args[0] in landing_storage or v.args[0] in landing)

    def _frees(self, kill: relax.Call) -> bool:
        """A kill that may return memory to the pool: of a tensor, not of a storage whose
        tensors hold it."""
        return not is_op(self.defs.get(kill.args[0]), ALLOC_STORAGE)

    def _root(self, var: relax.Expr) -> relax.Expr:
        """The tensor whose memory ``var`` views (through views, reshapes and aliases)."""
        value = self.defs.get(var)
        if isinstance(value, relax.Var):
            return self._root(value)
        if is_extern(value, VIEW) or is_extern(value, RESHAPE):
            return self._root(value.args[0])
        return var

    def _same_memory(self, var: relax.Expr) -> set[relax.Expr]:
        """Every var that names (part of) the memory of ``var``."""
        root = self._root(var)
        return {root} | {b.var for b in self.bindings if self._root(b.var).same_as(root)}

    def _is_download(self, value: relax.Expr) -> bool:
        return (_is_copy(value) and self._role(value.args[0]) == self.gpu
                and self._role(value.args[1]) == self.cpu)


@tvm.transform.module_pass(opt_level=0, name="OverlapCopies")
class OverlapCopies:
    """Kernels on a stream of their own, copies ordered by events (see the module doc)."""

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if "vdevice" not in mod.global_infos or len(mod.global_infos["vdevice"]) < 2:
            return mod
        func = mod["main"]
        gpu, cpu = ROLES.index("gpu"), ROLES.index("cpu")
        if not isinstance(func.body, relax.SeqExpr) or not _crosses(func):
            return mod
        overlap = _Overlap(mod, func, gpu, cpu)
        if overlap.ref is None:
            return mod
        staging = list(mod.attrs[STAGING_ATTR]) if STAGING_ATTR in (mod.attrs or {}) else []
        mod = with_main(mod, overlap.rewrite(), overlap.new_params)
        return mod.with_attr(STAGING_ATTR, staging + [p.name for p in overlap.new_params])


def _after_last_mention(out: list[relax.Binding], names: set[relax.Expr]) -> int:
    """Where a copy of a tensor can go at the earliest: after the last binding that names its
    memory (``names``: the tensor, its base and every view of either; the last writer), so
    it does not wait for the kernels queued after that."""
    for i in range(len(out) - 1, -1, -1):
        b = out[i]
        args = b.value.args if isinstance(b.value, relax.Call) else [b.value]
        if b.var in names or any(isinstance(a, relax.Var) and a in names for a in args):
            return i + 1
    return len(out)


def _is_copy(value: relax.Expr) -> bool:
    """A copy that the copy stream runs (TVM's, or a 2-D one between the devices)."""
    return is_extern(value, COPY) or is_extern(value, streams.COPY_BLOCK)


def _crosses(func: relax.Function) -> bool:
    """``main`` copies between the devices."""
    found = []
    relax.analysis.post_order_visit(func, lambda e: found.append(1) if (
        _is_copy(e) or is_extern(e, TO_DEVICE)) else None)
    return bool(found)
