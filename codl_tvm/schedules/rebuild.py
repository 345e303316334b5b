"""Rebuild a legalized PrimFunc around a ``te`` kernel of our own.

TVM 0.27 exposes no TIR substitution to Python, so instead of splicing statements the whole
PrimFunc is rebuilt in ``te``: the kernel replaces the prologue + main block, and each
injective epilogue block (bias add, ReLU after FuseTIR) is translated expression by
expression. Anything the translator does not know raises :class:`Unsupported`, and the
dispatcher falls back to another rule.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import te, tirx
from tvm.ir.expr import TensorLoad, Var
from tvm.s_tir import SBlock, Schedule

from .analysis import leaf_blocks


class Unsupported(Exception):
    """The PrimFunc has a shape the rebuilder does not translate."""


_BINARY: dict[type, Callable] = {
    tirx.Add: lambda a, b: a + b,
    tirx.Sub: lambda a, b: a - b,
    tirx.Mul: lambda a, b: a * b,
    tirx.Div: lambda a, b: tirx.Div(a, b),
    tirx.FloorDiv: tirx.floordiv,
    tirx.FloorMod: tirx.floormod,
    tirx.Max: tirx.max,
    tirx.Min: tirx.min,
    tirx.LT: lambda a, b: a < b,
    tirx.LE: lambda a, b: a <= b,
    tirx.GT: lambda a, b: a > b,
    tirx.GE: lambda a, b: a >= b,
    tirx.EQ: lambda a, b: a == b,
    tirx.NE: lambda a, b: a != b,
    tirx.And: tirx.all,
    tirx.Or: tirx.any,
}


def _convert(expr: object, env: dict, tensors: dict) -> tirx.PrimExpr:
    """Rebuild ``expr`` with block vars and buffers replaced by te axes and tensors."""
    if isinstance(expr, TensorLoad):
        tensor = _lookup(tensors, expr.source)
        return tensor[tuple(_convert(i, env, tensors) for i in expr.indices)]
    if isinstance(expr, Var):
        for var, axis in env.items():
            if var.same_as(expr):
                return axis
        raise Unsupported(f"free variable {expr}")
    if isinstance(expr, (tirx.IntImm, tirx.FloatImm)):
        return expr
    if type(expr) in _BINARY:
        return _BINARY[type(expr)](_convert(expr.a, env, tensors), _convert(expr.b, env, tensors))
    if isinstance(expr, tirx.Cast):
        return tirx.Cast(str(expr.ty), _convert(expr.value, env, tensors))
    if isinstance(expr, tirx.Select):
        return tirx.Select(*(
            _convert(e, env, tensors) for e in (expr.condition, expr.true_value, expr.false_value)
        ))
    if isinstance(expr, tvm.ir.expr.Call) and isinstance(expr.op, tvm.ir.Op):
        args = [_convert(a, env, tensors) for a in expr.args]
        return tvm.ir.expr.Call(expr.op, args, attrs=expr.attrs, ret_ty=expr.ty)
    raise Unsupported(f"cannot translate {type(expr).__name__}")


def _lookup(tensors: dict, var: Var) -> te.Tensor:
    for key, tensor in tensors.items():
        if key.same_as(var):
            return tensor
    raise Unsupported(f"buffer {var} not available")


def _epilogue(block: SBlock, tensors: dict, name: str) -> te.Tensor:
    """A te.compute equal to one injective block writing a whole buffer."""
    store = block.body
    if not isinstance(store, tirx.BufferStore) or block.init is not None:
        raise Unsupported(f"block {block.name_hint} is not a single store")
    ivars = [iv.var for iv in block.iter_vars]
    shape = tuple(store.buffer.shape)
    if len(store.indices) != len(ivars) or any(
        not (isinstance(i, Var) and i.same_as(v))
        for i, v in zip(store.indices, ivars, strict=False)
    ) or [int(iv.dom.extent) for iv in block.iter_vars] != [int(s) for s in shape]:
        raise Unsupported(f"block {block.name_hint} does not write its buffer one-to-one")

    def body(*axes: tirx.Var) -> tirx.PrimExpr:
        return _convert(store.value, dict(zip(ivars, axes, strict=False)), tensors)

    return te.compute(shape, body, name=name)


def rebuild(
    func: tirx.PrimFunc,
    main_block: str,
    kernel: Callable[..., te.Tensor],
    kernel_inputs: int,
    replace: dict[int, te.Tensor] | None = None,
) -> tirx.PrimFunc:
    """A PrimFunc equal to ``func`` with its prologue + ``main_block`` computed by ``kernel``.

    Parameters
    ----------
    func : PrimFunc
        Legalized (possibly fused) PrimFunc.
    main_block : str
        Name of the block the kernel replaces, together with every block before it.
    kernel : callable
        ``kernel(*first_params) -> te.Tensor`` with the main block's output shape.
    kernel_inputs : int
        How many leading params the kernel takes.
    replace : dict, optional
        Param index -> the placeholder the new PrimFunc takes there instead (a kernel input
        only: a packed weight, :mod:`.prepack`).
    """
    params = list(func.params)
    holders = {p: te.placeholder(tuple(p.shape), str(p.dtype), name=p.name) for p in params[:-1]}
    for i, holder in (replace or {}).items():
        if i >= kernel_inputs:
            raise Unsupported(f"param {i} is not a kernel input")
        holders[params[i]] = holder
    blocks = leaf_blocks(func)
    names = [b.name_hint for b in blocks]
    k = names.index(main_block)
    main = blocks[k]
    result = kernel(*(holders[p] for p in params[:kernel_inputs]))
    tensors = dict(holders)
    tensors[main.writes[0].source] = result
    for i, block in enumerate(blocks[k + 1 :]):
        last = i == len(blocks) - k - 2
        name = params[-1].name if last else block.name_hint
        result = _epilogue(block, tensors, name)
        tensors[block.writes[0].source] = result
    if not blocks[-1].writes[0].source.same_as(params[-1]):
        raise Unsupported("last block does not write the output")
    new = te.create_prim_func([*holders.values(), result])
    attrs = {k: v for k, v in (func.attrs or {}).items()}
    return new.with_attrs(attrs) if attrs else new


def epilogue_names(func: tirx.PrimFunc, main_block: str) -> list[str]:
    """Names of the blocks after ``main_block`` (to inline them after scheduling)."""
    names = [b.name_hint for b in leaf_blocks(func)]
    return names[names.index(main_block) + 1 :]





def inline_epilogue(sch: Schedule, last_kernel_block: str) -> int:
    """Inline every block after ``last_kernel_block`` into it; returns how many."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    names = [sch.get(b).name_hint for b in blocks]
    after = inline_shared_values(sch, names[names.index(last_kernel_block) + 1 :])
    for name in after:
        sch.reverse_compute_inline(sch.get_sblock(name))
    return len(after)


def inline_shared_values(sch: Schedule, epilogue: list[str]) -> list[str]:
    """The epilogue blocks left to reverse-inline, in order: all of them where each value has
    one reader; else only the last, every other block computed where it is read (GELU's x in
    0.5 * x * (1 + erf(x / sqrt 2)) has two: reverse-inlining the blocks one by one would
    rewrite the value the others read)."""
    if all(len(sch.get_consumers(sch.get_sblock(n))) == 1 for n in epilogue[:-1]):
        return epilogue
    for name in epilogue[:-1]:
        sch.compute_inline(sch.get_sblock(name))
    return epilogue[-1:]
