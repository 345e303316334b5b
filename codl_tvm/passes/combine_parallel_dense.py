"""CombineParallelDense: dense layers that read the same input run as one matmul.

Attention's query, key and value projections read the same hidden state through three
weights. Dense layers ``x @ W_i (+ b_i)`` whose input ``x`` is one variable and whose weights
are constants of the same K become one ``x @ concat(W_i)`` (``+ concat(b_i)``), and a split of
its result gives each layer's output: one kernel streams ``x`` once and fills the GPU with
3x the columns (a 128-token BERT-base: 36 matmul launches of N = 768 become 12 of N = 2304).

TVM's ``CombineParallelMatmul`` does this for weights that are parameters of ``main``; the
models here carry their weights as constants, which it does not match. A bias is combined
where every layer of the group adds one (a 1-D constant of its N) and nothing else reads the
matmul; otherwise the adds stay on the split parts. Runs in the prepare phase, after constant
folding, so plans name the combined layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

_MATMUL = tvm.ir.Op.get("relax.matmul")
_ADD = tvm.ir.Op.get("relax.add")


@dataclass
class _Group:
    """Dense layers reading one input: their matmul bindings and, if all have one, their
    bias adds (the bindings whose values the split replaces)."""

    x: relax.Var
    matmuls: list[relax.VarBinding] = field(default_factory=list)
    adds: list[relax.VarBinding] = field(default_factory=list)

    def outputs(self) -> list[relax.Var]:
        return [b.var for b in (self.adds or self.matmuls)]


def _const(expr: relax.Expr, ndim: int) -> np.ndarray | None:
    if isinstance(expr, tvm.ir.Constant) and len(expr.value.shape) == ndim:
        return expr.value.numpy()
    return None


def _dense(binding: relax.Binding) -> tuple[relax.Var, np.ndarray] | None:
    """``(x, W)`` of ``v = matmul(x, W)`` with ``W`` a 2-D constant."""
    call = getattr(binding, "value", None)
    if not isinstance(call, relax.Call) or not call.op.same_as(_MATMUL):
        return None
    x, w = call.args
    weight = _const(w, 2)
    return (x, weight) if isinstance(x, relax.Var) and weight is not None else None


def _groups(block: relax.DataflowBlock) -> list[_Group]:
    uses: dict[relax.Var, list[relax.VarBinding]] = {}
    for b in block.bindings:
        if isinstance(b.value, relax.Call):
            for a in b.value.args:
                if isinstance(a, relax.Var):
                    uses.setdefault(a, []).append(b)
    by_input: dict[tuple, _Group] = {}
    for b in block.bindings:
        dense = _dense(b)
        if dense is None or not isinstance(b.var, relax.DataflowVar):
            continue
        x, w = dense
        key = (x, w.shape[0], str(w.dtype))
        by_input.setdefault(key, _Group(x)).matmuls.append(b)
    groups = [g for g in by_input.values() if len(g.matmuls) > 1]
    for g in groups:
        adds = [uses.get(m.var, []) for m in g.matmuls]
        if all(len(a) == 1 and _is_bias_add(a[0], m) for a, m in zip(adds, g.matmuls)):
            g.adds = [a[0] for a in adds]
    return groups


def _is_bias_add(add: relax.VarBinding, matmul: relax.VarBinding) -> bool:
    call = add.value
    if not call.op.same_as(_ADD) or not isinstance(add.var, relax.DataflowVar):
        return False
    lhs, rhs = call.args
    bias = _const(rhs, 1)
    n = _dense(matmul)[1].shape[1]
    return lhs.same_as(matmul.var) and bias is not None and bias.shape[0] == n


@mutator
class _Combiner(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.first: dict[relax.Var, _Group] = {}
        self.dropped: set[relax.Var] = set()

    def visit_dataflow_block_(self, block: relax.DataflowBlock) -> relax.DataflowBlock:
        for g in _groups(block):
            self.first[g.matmuls[0].var] = g
            self.dropped |= {b.var for b in g.matmuls + g.adds}
        return super().visit_dataflow_block_(block)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        group = self.first.get(binding.var)
        if group is not None:
            self._combine(group)
        elif binding.var not in self.dropped:
            super().visit_var_binding_(binding)

    def _combine(self, g: _Group) -> None:
        weights = [_dense(b)[1] for b in g.matmuls]
        out = self.builder_.emit(relax.op.matmul(
            self.visit_expr(g.x), relax.const(np.concatenate(weights, axis=1))))
        if g.adds:
            bias = np.concatenate([_const(b.value.args[1], 1) for b in g.adds])
            out = self.builder_.emit(relax.op.add(out, relax.const(bias)))
        cuts = np.cumsum([w.shape[1] for w in weights])[:-1].tolist()
        parts = self.builder_.emit(relax.op.split(out, cuts, axis=-1))
        for i, var in enumerate(g.outputs()):
            self.set_var_remap(var, self.builder_.emit(relax.TupleGetItem(parts, i)))


@tvm.transform.module_pass(opt_level=0, name="CombineParallelDense")
class CombineParallelDense:
    """Combine dense layers (``matmul`` by a constant weight, optionally a constant bias add)
    that read the same input into one matmul whose result is split back."""

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        combiner = _Combiner(mod)
        updates = {gv: combiner.visit_expr(f) for gv, f in mod.functions.items()
                   if isinstance(f, relax.Function)}
        if not combiner.first:
            return mod
        mod = mod.clone()
        for gv, f in updates.items():
            mod[gv] = f
        return mod
