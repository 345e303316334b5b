"""A kernel that reads or writes one block of a whole tensor in place of a tensor of its own.

A split's GPU part reads a block of rows (or channels) of its input and writes a block of the
output. :class:`~codl_tvm.passes.LowerSlicesToBlockCopies` can hand the part the whole tensors
instead: :func:`on_whole_tensors` rewrites the part's kernel so that a parameter is the whole
tensor and every access to it is shifted by the block's first index along the block's axis.
The kernel's schedule is untouched (it reads and writes the same elements, only at other
addresses), so the copy within the GPU that moved the block disappears with no new kernel.
"""

from __future__ import annotations

import json

import tvm
import tvm.tirx as T
import tvm_ffi
from tvm import relax

Block = tuple[int, int, int]  # (axis, first index, length) along one axis
# the attribute a rewritten kernel carries: {parameter index: [axis, first, length, whole]}
BLOCK_PARAMS_ATTR = "codl.block_params"


def on_whole_tensors(func: T.PrimFunc, blocks: dict[int, tuple[list[int], Block]]
                     ) -> T.PrimFunc | None:
    """``func`` with parameter ``i`` the whole tensor of shape ``whole`` for each
    ``i: (whole, block)`` of ``blocks``, accessed at ``block``; None where a parameter is used
    other than by element loads, stores and access regions (a pointer taken from it)."""
    params = list(func.params)
    shifted: list[tuple[T.Buffer, T.Buffer, int, int]] = []  # (old, new, axis, first)
    for index, (whole, (axis, first, length)) in blocks.items():
        old = params[index]
        if [int(d) for i, d in enumerate(old.shape) if i != axis] != [
                d for i, d in enumerate(whole) if i != axis] or int(old.shape[axis]) != length:
            raise ValueError(f"parameter {index} of {func}: shape {list(old.shape)} is not "
                             f"block {(axis, first, length)} of {whole}")
        dtype = str(old.shape[0].ty)
        new = T.decl_buffer([T.IntImm(dtype, d) for d in whole], old.dtype, name=old.name)
        shifted.append((old, new, axis, first))
        params[index] = new

    def find(buffer):
        return next((s for s in shifted if buffer.same_as(s[0])), None)

    def shift(indices, axis: int, first: int) -> list:
        return [ix + T.const(first, str(ix.ty)) if k == axis else ix
                for k, ix in enumerate(indices)]

    def load(e):
        hit = find(e.source)
        return e if hit is None else T.BufferLoad(hit[1], shift(e.indices, *hit[2:]))

    def store(s):
        hit = find(s.buffer)
        return s if hit is None else T.BufferStore(hit[1], s.value, shift(s.indices, *hit[2:]))

    def region(r):
        hit = find(r.source)
        if hit is None:
            return r
        _, new, axis, first = hit
        ranges = [tvm.ir.Range.from_min_extent(rg.min + T.const(first, str(rg.min.ty)),
                                               rg.extent) if k == axis else rg
                  for k, rg in enumerate(r.region)]
        return T.BufferRegion(new, ranges)

    body = tvm_ffi.structural_map(func.body, [(tvm.ir.TensorLoad, load),
                                              (T.BufferStore, store),
                                              (tvm.ir.TensorRegion, region)])
    old_vars = [v for old, *_ in shifted for v in (old, old.data)]
    left: list = []
    tvm_ffi.structural_walk(body, (tvm.ir.expr.Var, lambda v: left.append(v) if any(
        v.same_as(o) for o in old_vars) else None))
    if left:
        return None
    record = {str(i): [*block, list(whole)] for i, (whole, block) in blocks.items()}
    return T.PrimFunc(params, body, func.ret_type, func.attrs).with_attr(
        BLOCK_PARAMS_ATTR, json.dumps(record))


def without_unused_kernels(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` less the kernels no Relax function calls any more (the slices and concats
    a pass replaced, the kernels it rewrote): they would be built for nothing."""
    called: set[str] = set()
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, lambda e: called.add(e.name_hint) if isinstance(
                e, tvm.ir.GlobalVar) else None)
    unused = [gv for gv, f in mod.functions.items()
              if isinstance(f, T.PrimFunc) and gv.name_hint not in called]
    if not unused:
        return mod
    mod = mod.clone()
    for gv in unused:
        del mod[gv]
    return mod
