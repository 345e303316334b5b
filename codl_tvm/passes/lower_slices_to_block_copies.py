"""LowerSlicesToBlockCopies: a split's row slices and its concat become copies, not kernels.

A split by rows reads a block of its input's rows on each side and writes the two parts into
the output's rows. In NCHW a block of rows is one strided 2-D region (N*C runs of rows*W
elements), so TVM slices it with a kernel and joins the parts with a ``concatenate`` kernel
that waits for both parts. One 2-D copy (:func:`codl_tvm.streams.copy_block`,
``cudaMemcpy2DAsync``) moves the same block, and lets each part move when it is ready; the
GPU's own kernel can read and write its block of the whole tensors, so that nothing moves on
the GPU's side (``in_kernels``; :mod:`~codl_tvm.passes.block_params`). The default on a CUDA
GPU (``compile(..., block_copies=None)``; measured in ``benchmarks/COEXEC.md``). Run on the
lowered VM code after :class:`StageCrossDeviceCopies` and :class:`WriteSplitOutputsInPlace`
and before :class:`OverlapCopies`, it rewrites:

- **slice, then copy to the CPU**: the copy takes the rows from the full tensor; the slice
  kernel and its tensor go;
- **slice on the GPU**: the one kernel that reads it reads its rows of the whole tensor
  (``in_kernels``), else a copy within the GPU, in order with the kernels (their stream);
- **concat of a GPU part and copied-back CPU parts** (one, or one per chunk of the CPU's
  rows; the parts not contiguous, else :class:`WriteSplitOutputsInPlace` took them): the
  kernel that writes the GPU part writes its rows of the output (``in_kernels``; else the part
  is copied into them within the GPU), each CPU part goes straight from its staging buffer
  into its rows, where it was uploaded (so a chunk moves while the next one computes); the
  concat kernel and the CPU parts' GPU tensors go. The output is allocated where the GPU part
  is, before the CPU part runs: allocated after that part's inputs were freed, its memory
  might still be read by kernels in flight, and the copy into it would have to wait for them.
  The GPU part's copy is issued right after the kernel that writes it, not after the CPU part
  (which the host runs in between).

A slice is recognised by its kernel's body (one store of a load whose indices differ by a
constant along one axis), a concat by its name and shapes; anything else stays a kernel.
Between CPU tensors the copy is a numpy copy, so the pass runs and is checked on the CPU pair.
"""

from __future__ import annotations

import math

import tvm
import tvm.sym
import tvm.tirx as T
from tvm import relax

from ..device import ROLES
from ..streams import COPY_BLOCK
from .block_params import Block, on_whole_tensors, without_unused_kernels
from .stage_cross_device_copies import (
    ALLOC_TENSOR,
    COPY,
    KILL,
    VIEW,
    bindings_of,
    is_extern,
    is_op,
    own_storage,
    tensor_role,
    with_main,
)


def row_block(func: tvm.tirx.PrimFunc) -> tuple[list[int], list[int], Block] | None:
    """(input shape, output shape, block) of a kernel that copies one block of its input
    along one axis (a step-1 ``strided_slice``); None for any other kernel."""
    if len(func.params) != 2:
        return None
    src, dst = func.params  # buffers
    sch = tvm.s_tir.Schedule(func)
    blocks = [sch.get(rv) for rv in sch.get_child_blocks(sch.get_sblock("root"))]
    if len(blocks) != 1 or src.dtype != dst.dtype:
        return None
    store = blocks[0].body
    if not (isinstance(store, tvm.tirx.BufferStore) and store.buffer.same_as(dst)
            and isinstance(store.value, tvm.ir.TensorLoad) and store.value.source.same_as(src)
            and len(store.indices) == len(store.value.indices)):
        return None
    analyzer = tvm.sym.Analyzer()
    offsets = [analyzer.simplify(ld - st) for st, ld in zip(store.indices, store.value.indices)]
    if not all(isinstance(o, tvm.tirx.IntImm) for o in offsets):
        return None
    in_shape, out_shape = _dims(src.shape), _dims(dst.shape)
    # every element of the output written once: each store index its own block variable (or
    # 0 on an axis of extent 1)
    block_vars = [iv.var for iv in blocks[0].iter_vars]
    for index, extent in zip(store.indices, out_shape):
        if isinstance(index, tvm.tirx.IntImm):
            if int(index) != 0 or extent != 1:
                return None
        elif not any(index.same_as(v) for v in block_vars):
            return None
    named = [i for i in store.indices if not isinstance(i, tvm.tirx.IntImm)]
    if len({id(v) for i in named for v in block_vars if i.same_as(v)}) != len(named):
        return None
    axes = [i for i, (p, q) in enumerate(zip(in_shape, out_shape)) if p != q]
    if len(axes) != 1 or any(int(o) for i, o in enumerate(offsets) if i != axes[0]):
        return None
    return in_shape, out_shape, (axes[0], int(offsets[axes[0]]), out_shape[axes[0]])


def _dims(shape) -> list[int]:
    return [int(d) for d in shape]


def block_copy_args(whole: list[int], block: Block, nbytes: int, into: bool) -> list[int]:
    """``copy_block``'s byte geometry (src offset, src pitch, dst offset, dst pitch, width,
    height) of ``block`` of a compact tensor of shape ``whole``: out of it, or ``into`` it."""
    axis, first, length = block
    inner = math.prod(whole[axis + 1:]) * nbytes
    width, height = length * inner, math.prod(whole[:axis])
    whole_side = [first * inner, whole[axis] * inner]
    block_side = [0, width]
    src, dst = (block_side, whole_side) if into else (whole_side, block_side)
    return [*src, *dst, width, height]


def _copy_block(src: relax.Expr, dst: relax.Expr, geometry: list[int]) -> relax.VarBinding:
    args = [src, dst, *(relax.prim_value(tvm.tirx.IntImm("int64", g)) for g in geometry)]
    call = relax.Call(relax.ExternFunc(COPY_BLOCK), args, ty_args=[relax.TupleType([])])
    return relax.VarBinding(relax.Var("_", relax.TupleType([])), call)


class _Lower:
    """Rewrites the bindings of one lowered ``main``."""

    def __init__(self, mod: tvm.IRModule, func: relax.Function, gpu: int, cpu: int,
                 in_kernels: bool = True):
        self.mod, self.gpu, self.cpu, self.in_kernels = mod, gpu, cpu, in_kernels
        self.vdevices = list(mod.global_infos["vdevice"])
        self.bindings, self.defs, self.uses = bindings_of(func)
        self.drop: set[relax.Var] = set()
        self.replace: dict[relax.Var, list[relax.Binding]] = {}
        self.before: dict[relax.Var, list[relax.Binding]] = {}  # moved allocations
        self.after: dict[relax.Var, list[relax.Binding]] = {}  # copies issued early
        # kernels that take a whole tensor for a block: binding -> {arg: (tensor, shape, block)}
        self.whole: dict[relax.Var, dict[int, tuple[relax.Var, list[int], Block]]] = {}
        self.rewritten: dict[relax.Var, T.PrimFunc] = {}  # their kernels, rewritten once
        self.order = {b.var: i for i, b in enumerate(self.bindings)}

    def _role(self, var: relax.Expr) -> int | None:
        return tensor_role(var, self.defs, self.vdevices)

    def _kernel(self, value: relax.Expr, prefix: str) -> tvm.tirx.PrimFunc | None:
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar)
                and value.op.name_hint.startswith(prefix)):
            return None
        func = self.mod[value.op]
        return func if isinstance(func, tvm.tirx.PrimFunc) else None

    def _only_used_by(self, var: relax.Var, allowed: set[relax.Var]) -> bool:
        """``var`` is a pooled tensor of its own that only ``allowed`` bindings (and kills
        or sync views) use."""
        if not is_op(self.defs.get(var), ALLOC_TENSOR):
            return False
        return all(u.var in allowed or is_op(u.value, KILL) or self._sync_view(u)
                   for u in self.uses.get(var, []))

    @staticmethod
    def _sync_view(b: relax.Binding) -> bool:
        return is_extern(b.value, VIEW) and b.var.name == "codl_sync_view"

    def _remove_tensor(self, var: relax.Var, keep_views_on: relax.Var) -> list[relax.Binding]:
        """Drop ``var``'s allocation, kills and storage; returns its sync views (on
        ``keep_views_on`` now) and their syncs, dropped where they were."""
        self.drop.add(var)
        syncs: list[relax.Binding] = []
        for u in self.uses.get(var, []):
            if is_op(u.value, KILL):
                self.drop.add(u.var)
            elif self._sync_view(u):
                v = u.value
                view = relax.Call(v.op, [keep_views_on, *v.args[1:]], ty_args=v.ty_args)
                syncs.append(relax.VarBinding(u.var, view))
                syncs += self.uses.get(u.var, [])
                self.drop.update(b.var for b in [u, *self.uses.get(u.var, [])])
        self.drop.update(own_storage(var, self.defs, self.uses))
        return syncs

    def slices(self) -> None:
        for b in self.bindings:
            func = self._kernel(b.value, "strided_slice")
            geo = row_block(func) if func is not None else None
            if geo is None:
                continue
            src, dst = b.value.args
            whole, _, block = geo
            args = block_copy_args(whole, block, func.params[0].dtype.bits // 8,
                                   into=False)
            copies = [u for u in self.uses.get(dst, []) if is_extern(u.value, COPY)]
            if (self._role(src) == self.gpu and len(copies) == 1
                    and copies[0].value.args[0].same_as(dst)
                    and self._role(copies[0].value.args[1]) == self.cpu
                    and self._only_used_by(dst, {b.var, copies[0].var})):
                # the rows go to the CPU straight from the whole tensor, where the slice was
                # (the whole tensor may be freed before the copy of the slice came)
                syncs = self._remove_tensor(dst, keep_views_on=src)
                self.drop.add(copies[0].var)
                self.replace[b.var] = [_copy_block(src, copies[0].value.args[1], args), *syncs]
            elif self._role(src) == self.gpu and self._role(dst) == self.gpu:
                if self.in_kernels and self._read_in_place(b, src, dst, whole, block):
                    continue
                self.replace[b.var] = [_copy_block(src, dst, args)]

    def concats(self) -> None:
        for b in self.bindings:
            func = self._kernel(b.value, "concatenate")
            if func is None or len(b.value.args) < 3:
                continue
            shapes = [_dims(p.shape) for p in func.params]
            axes = {i for s in shapes[:-1] for i, (p, q) in enumerate(zip(s, shapes[-1]))
                    if p != q}
            if len(axes) != 1 or any(self._role(a) != self.gpu for a in b.value.args):
                continue
            axis, nbytes = axes.pop(), func.params[0].dtype.bits // 8
            out, first = b.value.args[-1], 0
            kept, uploads, gpu_parts = [], [], []
            for part, shape in zip(b.value.args[:-1], shapes[:-1]):
                block = (axis, first, shape[axis])
                first += shape[axis]
                args = block_copy_args(shapes[-1], block, nbytes, into=True)
                upload = [u for u in self.uses.get(part, []) if is_extern(u.value, COPY)
                          and u.value.args[1].same_as(part)]
                if (len(upload) == 1 and self._role(upload[0].value.args[0]) == self.cpu
                        and self._only_used_by(part, {b.var, upload[0].var})):
                    # the CPU's part goes from its staging buffer into its rows of the output
                    self.drop.add(upload[0].var)
                    self._remove_tensor(part, keep_views_on=out)  # an upload has no sync
                    uploads.append((upload[0].var,
                                    _copy_block(upload[0].value.args[0], out, args)))
                else:
                    kept.append(_copy_block(part, out, args))
                    gpu_parts.append((part, block))
            self.replace[b.var] = kept + [c for _, c in uploads]
            if not uploads or len(gpu_parts) != 1:
                continue
            gpu_part, gpu_block = gpu_parts[0]
            if not self._allocate_early(out, gpu_part):
                continue
            writer = self._last_writer(gpu_part, before=b.var)
            if writer is None:
                continue
            # each CPU part (chunk) goes into the output where it was uploaded, so that it
            # moves while the next chunk computes
            self.replace[b.var] = []
            for at, copy in uploads:
                self.replace[at] = [copy]
            if not (self.in_kernels and self._write_in_place(
                    writer, gpu_part, out, shapes[-1], gpu_block, b.var)):
                # the GPU part's copy goes as soon as it is written
                self.after.setdefault(writer, []).append(kept[0])

    def _kernel_taking(self, users: list[relax.Binding], var: relax.Var
                       ) -> tuple[relax.Binding, int] | None:
        """The one kernel call among ``users`` and where it takes ``var`` (once), if its
        kernel can take a whole tensor there."""
        calls = [u for u in users if self._kernel(u.value, "") is not None]
        if len(calls) != 1:
            return None
        at = [i for i, a in enumerate(calls[0].value.args) if a.same_as(var)]
        return (calls[0], at[0]) if len(at) == 1 else None

    def _take_whole(self, call: relax.Binding, index: int, tensor: relax.Var,
                    whole: list[int], block: Block) -> bool:
        """Record that ``call`` takes ``tensor`` (of shape ``whole``) for its argument
        ``index`` at ``block``, if its kernel allows it (with what is recorded already)."""
        taken = {**self.whole.get(call.var, {}), index: (tensor, whole, block)}
        func = self._kernel(call.value, "")
        rewritten = on_whole_tensors(func, {i: (w, k) for i, (_, w, k) in taken.items()})
        if rewritten is None:
            return False
        self.whole[call.var], self.rewritten[call.var] = taken, rewritten
        return True

    def _read_in_place(self, b: relax.Binding, src: relax.Var, dst: relax.Var,
                       whole: list[int], block: Block) -> bool:
        """The one GPU kernel that reads the slice ``dst`` reads its block of ``src``: no
        copy. ``src`` then lives until that kernel (its kills move after it)."""
        users = [u for u in self.uses.get(dst, []) if not u.var.same_as(b.var)
                 and not is_op(u.value, KILL) and not self._sync_view(u)]
        found = self._kernel_taking(users, dst)
        if found is None or not (isinstance(self.defs.get(src), type(None))
                                 or is_op(self.defs.get(src), ALLOC_TENSOR)):
            return False  # a parameter of main or a pooled tensor of its own, not a view
        call, index = found
        if not self._take_whole(call, index, src, whole, block):
            return False
        self.replace[b.var] = self._remove_tensor(dst, keep_views_on=src)
        for kill in self.uses.get(src, []):
            if is_op(kill.value, KILL) and self.order[kill.var] < self.order[call.var]:
                self.drop.add(kill.var)
                self.after.setdefault(call.var, []).insert(0, kill)
        return True

    def _write_in_place(self, writer: relax.Var, part: relax.Var, out: relax.Var,
                        whole: list[int], block: Block, concat: relax.Var) -> bool:
        """The kernel that writes the GPU part ``part`` (its last argument) writes its block
        of ``out`` instead: no copy within the GPU (``out`` is allocated before it)."""
        call = next(b for b in self.bindings if b.var.same_as(writer))
        args = call.value.args
        if not (args and args[-1].same_as(part) and self._only_used_by(part, {writer, concat})):
            return False
        if not self._take_whole(call, len(args) - 1, out, whole, block):
            return False
        self._remove_tensor(part, keep_views_on=out)
        return True

    def kernels_on_whole_tensors(self, bb: relax.BlockBuilder) -> dict[relax.Var, relax.Binding]:
        """Each kernel call that takes whole tensors: its new binding (its kernel added to
        ``bb``'s module)."""
        out = {}
        for b in self.bindings:
            if b.var not in self.whole:
                continue
            taken = self.whole[b.var]
            gv = b.value.op
            # the device suffix stays last (BindKernelTargets' ``_d<vdevice>``)
            stem, sep, dev = gv.name_hint.rpartition("_d")
            name = (f"{stem}_block{len(out)}{sep}{dev}" if sep and dev.isdigit()
                    else f"{gv.name_hint}_block{len(out)}")
            new_gv = bb.add_func(self.rewritten[b.var].with_attr("global_symbol", name), name)
            args = [taken[i][0] if i in taken else a for i, a in enumerate(b.value.args)]
            out[b.var] = relax.VarBinding(b.var, relax.Call(new_gv, args, ty_args=b.value.ty_args))
        return out

    def _last_writer(self, var: relax.Var, before: relax.Var) -> relax.Var | None:
        """The last kernel before ``before`` that takes ``var`` (the one that writes it)."""
        found = None
        for b in self.bindings:
            if b.var.same_as(before):
                return found
            v = b.value
            if (isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.GlobalVar)
                    and any(a.same_as(var) for a in v.args)):
                found = b.var
        return None

    def _allocate_early(self, out: relax.Var, gpu_part: relax.Var) -> bool:
        """Move ``out``'s allocation (storage, tensor, the storage's kill) to just before
        ``gpu_part``'s; whether ``out`` is allocated before it now."""
        alloc = self.defs.get(out)
        if not is_op(alloc, ALLOC_TENSOR) or not is_op(self.defs.get(gpu_part), ALLOC_TENSOR):
            return False
        order = {b.var: i for i, b in enumerate(self.bindings)}
        if order[out] < order[gpu_part]:
            return True
        storage = own_storage(out, self.defs, self.uses)
        if not storage:
            return False
        moved = [b for b in self.bindings if b.var.same_as(out) or b.var in storage]
        self.drop.update(b.var for b in moved)
        self.before.setdefault(gpu_part, []).extend(moved)
        return True

    def rewrite(self) -> tuple[list[relax.Binding], tvm.IRModule] | None:
        """``main``'s new bindings and the module with the kernels they call that are new."""
        self.slices()
        self.concats()
        if not self.replace and not self.drop:
            return None
        bb = relax.BlockBuilder(self.mod)
        kernels = self.kernels_on_whole_tensors(bb)
        out: list[relax.Binding] = []
        for b in self.bindings:
            out += self.before.get(b.var, [])
            if b.var in self.replace:
                out += self.replace[b.var]
            elif b.var in kernels:
                out.append(kernels[b.var])
            elif b.var not in self.drop:
                out.append(b)
            out += self.after.get(b.var, [])
        return out, bb.get()


@tvm.transform.module_pass(opt_level=0, name="LowerSlicesToBlockCopies")
class LowerSlicesToBlockCopies:
    """Row slices and joins of a split as 2-D copies (see the module doc).

    Parameters
    ----------
    in_kernels : bool
        Where the GPU's part is one kernel that reads the slice or writes the part, that
        kernel reads its block of the whole input or writes its block of the output
        (:func:`~codl_tvm.passes.block_params.on_whole_tensors`): no copy within the GPU.
        False keeps those copies.
    """

    def __init__(self, in_kernels: bool = True):
        self.in_kernels = in_kernels

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if "vdevice" not in mod.global_infos or len(mod.global_infos["vdevice"]) < 2:
            return mod
        func = mod["main"]
        if not isinstance(func.body, relax.SeqExpr):
            return mod
        lowered = _Lower(mod, func, ROLES.index("gpu"), ROLES.index("cpu"),
                         self.in_kernels).rewrite()
        if lowered is None:
            return mod
        bindings, mod = lowered
        return without_unused_kernels(with_main(mod, bindings))

