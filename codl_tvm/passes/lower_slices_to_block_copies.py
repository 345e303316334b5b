"""LowerSlicesToBlockCopies: a split's row slices and its concat become copies, not kernels.

A split by rows reads a block of its input's rows on each side and writes the two parts into
the output's rows. In NCHW a block of rows is one strided 2-D region (N*C runs of rows*W
elements), so TVM slices it with a kernel and joins the parts with a ``concatenate`` kernel
that waits for both parts. One 2-D copy (:func:`codl_tvm.streams.copy_block`,
``cudaMemcpy2DAsync``) moves the same block, and lets each part move when it is ready. The
copies are not faster than the kernels per byte (under MPS a copy within the GPU is held to the
process's SMs too), and each costs a Python call, so the pass is opt-in
(``compile(..., block_copies=True)``): measured on an H200 at 8 SMs it pays on large
activations and loses on small ones (``benchmarks/COEXEC.md``). This pass, run on the lowered
VM code after
:class:`StageCrossDeviceCopies` and :class:`WriteSplitOutputsInPlace` and before
:class:`OverlapCopies`, rewrites:

- **slice, then copy to the CPU**: the copy takes the rows from the full tensor; the slice
  kernel and its tensor go;
- **slice on the GPU**: a copy within the GPU, in order with the kernels (their stream);
- **concat of a GPU part and a copied-back CPU part** (the parts not contiguous, else
  :class:`WriteSplitOutputsInPlace` took them): the GPU part is copied into its rows of the
  output within the GPU, the CPU part straight from its staging buffer into the rest; the
  concat kernel and the CPU part's GPU tensor go. The output is allocated where the GPU part
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
from tvm import relax

from ..device import ROLES
from ..streams import COPY_BLOCK
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

Block = tuple[int, int, int]  # (axis, first index, length) along one axis


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

    def __init__(self, mod: tvm.IRModule, func: relax.Function, gpu: int, cpu: int):
        self.mod, self.gpu, self.cpu = mod, gpu, cpu
        self.vdevices = list(mod.global_infos["vdevice"])
        self.bindings, self.defs, self.uses = bindings_of(func)
        self.drop: set[relax.Var] = set()
        self.replace: dict[relax.Var, list[relax.Binding]] = {}
        self.before: dict[relax.Var, list[relax.Binding]] = {}  # moved allocations
        self.after: dict[relax.Var, list[relax.Binding]] = {}  # copies issued early

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
                self.replace[b.var] = [_copy_block(src, dst, args)]

    def concats(self) -> None:
        for b in self.bindings:
            func = self._kernel(b.value, "concatenate")
            if func is None or len(b.value.args) != 3:
                continue
            shapes = [_dims(p.shape) for p in func.params]
            axes = [i for i, (p, q) in enumerate(zip(shapes[0], shapes[2])) if p != q]
            if len(axes) != 1 or any(self._role(a) != self.gpu for a in b.value.args):
                continue
            axis, nbytes = axes[0], func.params[0].dtype.bits // 8
            out, first = b.value.args[2], 0
            bindings, uploaded = [], False
            for part, shape in zip(b.value.args[:2], shapes[:2]):
                block = (axis, first, shape[axis])
                first += shape[axis]
                args = block_copy_args(shapes[2], block, nbytes, into=True)
                upload = [u for u in self.uses.get(part, []) if is_extern(u.value, COPY)
                          and u.value.args[1].same_as(part)]
                if (len(upload) == 1 and self._role(upload[0].value.args[0]) == self.cpu
                        and self._only_used_by(part, {b.var, upload[0].var})):
                    # the CPU's part goes from its staging buffer into its rows of the output
                    self.drop.add(upload[0].var)
                    self._remove_tensor(part, keep_views_on=out)  # an upload has no sync
                    bindings.append(_copy_block(upload[0].value.args[0], out, args))
                    uploaded = True
                else:
                    bindings.insert(0, _copy_block(part, out, args))
                    gpu_part = part
            self.replace[b.var] = bindings
            if uploaded and len(bindings) == 2 and self._allocate_early(out, gpu_part):
                writer = self._last_writer(gpu_part, before=b.var)
                if writer is not None:  # the GPU part's copy goes as soon as it is written
                    self.after.setdefault(writer, []).append(bindings[0])
                    self.replace[b.var] = bindings[1:]

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

    def rewrite(self) -> list[relax.Binding] | None:
        self.slices()
        self.concats()
        if not self.replace and not self.drop:
            return None
        out: list[relax.Binding] = []
        for b in self.bindings:
            out += self.before.get(b.var, [])
            if b.var in self.replace:
                out += self.replace[b.var]
            elif b.var not in self.drop:
                out.append(b)
            out += self.after.get(b.var, [])
        return out


@tvm.transform.module_pass(opt_level=0, name="LowerSlicesToBlockCopies")
class LowerSlicesToBlockCopies:
    """Row slices and joins of a split as 2-D copies (see the module doc)."""

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if "vdevice" not in mod.global_infos or len(mod.global_infos["vdevice"]) < 2:
            return mod
        func = mod["main"]
        if not isinstance(func.body, relax.SeqExpr):
            return mod
        bindings = _Lower(mod, func, ROLES.index("gpu"), ROLES.index("cpu")).rewrite()
        return mod if bindings is None else with_main(mod, bindings)
