"""PrepackWeights: the CPU kernels' weight layout passes run once, not on every call.

A CPU conv kernel copies its weight into the layout its register tile reads on every call
(:mod:`codl_tvm.schedules.prepack`): for ResNet-18 that is every weight of the model read and
written again per inference. The scheduler gives such a kernel a second version that reads
the packed weight as its parameter, and the pass as a PrimFunc of its own. This pass calls
that version wherever the weight is a lifted weight of ``main``
(:class:`LiftDeviceConstants`): ``main`` takes the packed weight instead (beside the original
where other kernels read that too), and a function ``codl_prepack`` computes every packed
weight from the lifted ones. The runtime calls it once when it loads the artifact
(:func:`codl_tvm.runtime.upload_params`), on the target's CPU, as TVM's
``LiftTransformParams`` does; the artifact keeps the weights as the model has them. Kernels
whose weight is computed at run time keep packing it. Run right after
:class:`~codl_tvm.schedules.ApplySchedules`.

``params=True`` (for the profiler's one-op functions, whose weights are parameters without
values) makes every function parameter that a prepacking kernel reads as its weight take the
packed shape: the caller passes a tensor of it.
"""

from __future__ import annotations

from collections import defaultdict

import tvm
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..schedules.prepack import PREPACK_ATTR, WEIGHT_PARAM
from .lift_device_constants import LIFTED_ATTR

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
PREPACK_FUNCTION = "codl_prepack"
PREPACK_PARAMS_ATTR = "codl.prepack_params"


@mutator
class _Rewriter(PyExprMutator):
    """Calls of prepacking kernels whose weight is one of ``weights`` read the packed one."""

    def __init__(self, mod: tvm.IRModule, versions: dict[str, tvm.ir.GlobalVar]):
        super().__init__(mod)
        self.versions = versions  # kernel name -> its version that reads a packed weight
        self.weights: set[relax.Var] = set()
        self.packed: dict[tuple[relax.Var, str], relax.Var] = {}

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not call.op.same_as(_CALL_TIR) or call.args[0].name_hint not in self.versions:
            return call
        args = list(call.args[1].fields)
        weight = args[WEIGHT_PARAM]
        if not isinstance(weight, relax.Var) or weight not in self.weights:
            return call
        name = call.args[0].name_hint
        version = self.versions[name]
        if (weight, name) not in self.packed:
            func = self.builder_.get()[version]
            shape = [int(d) for d in func.params[WEIGHT_PARAM].shape]
            ty = relax.TensorType(shape, weight.ty.dtype, weight.ty.vdevice)
            self.packed[(weight, name)] = relax.Var(f"{weight.name}_{name}", ty)
        args[WEIGHT_PARAM] = self.packed[(weight, name)]
        return relax.call_tir(version, relax.Tuple(args), call.ty_args[0])


@tvm.transform.module_pass(opt_level=0, name="codl.PrepackWeights")
class PrepackWeights:
    """The CPU kernels read their lifted weights packed, by ``codl_prepack`` at load time.

    Parameters
    ----------
    params : bool
        Also prepack weights that are plain parameters of a function (no value): the
        parameter takes the packed shape (the profiler's one-op functions).
    """

    def __init__(self, params: bool = False):
        self.params = params

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext
                         ) -> tvm.IRModule:
        gvs = {gv.name_hint: gv for gv in mod.get_global_vars()}
        prepack = {gv.name_hint: dict(func.attrs[PREPACK_ATTR])
                   for gv, func in mod.functions_items()
                   if isinstance(func, tirx.PrimFunc) and func.attrs is not None
                   and PREPACK_ATTR in func.attrs}
        if not prepack:
            return mod
        lifted = dict(mod.attrs[LIFTED_ATTR]) if mod.attrs and LIFTED_ATTR in mod.attrs else {}
        work = tvm.IRModule({gv: _strip(f) for gv, f in mod.functions_items()},
                            mod.attrs, mod.global_infos)
        rewriter = _Rewriter(work, {name: gvs[names["kernel"]] for name, names in prepack.items()})
        packs: list[tuple[relax.Var, tvm.ir.GlobalVar, relax.Var]] = []  # of main's weights
        for gv, func in list(work.functions_items()):
            if not isinstance(func, relax.Function):
                continue
            rewriter.weights = {p for p in func.params if p.name in lifted or self.params}
            rewriter.packed = {}
            body = rewriter.visit_expr(func.body)
            if not rewriter.packed:
                continue
            params = _new_params(func, body, rewriter.packed)
            rewriter.builder_.update_func(
                gv, relax.Function(params, body, func.ret_ty, func.is_pure, func.attrs))
            packs += [(var, gvs[prepack[kernel]["pack"]], weight)
                      for (weight, kernel), var in rewriter.packed.items()
                      if weight.name in lifted]
        bb = rewriter.builder_
        if packs:
            _add_prepack_function(bb, packs)
        work = _drop_unused(bb.get())
        if not lifted:
            return work
        main = {p.name for p in work[work.get_global_var("main")].params}
        sources = [w.name for w in _sources(packs)]
        values = {n: v for n, v in lifted.items() if n in main or n in sources}
        work = work.with_attr(LIFTED_ATTR, values)
        if packs:
            work = work.with_attr(PREPACK_PARAMS_ATTR, {
                "function": PREPACK_FUNCTION, "sources": sources,
                "outputs": [var.name for var, _, _ in packs]})
        return work


def _sources(packs: list) -> list[relax.Var]:
    """The lifted weights the packs read, each once, in order."""
    return list(dict.fromkeys(weight for _, _, weight in packs))


def _add_prepack_function(bb: relax.BlockBuilder, packs: list) -> None:
    """``codl_prepack(weights...) -> (packed...)``: every pack, one call of each kernel's
    weight pass; the runtime calls it once when it loads the artifact."""
    sources = _sources(packs)
    params = [relax.Var(w.name, w.ty) for w in sources]
    by_source = dict(zip(sources, params, strict=True))
    fb = relax.BlockBuilder()
    with fb.function(PREPACK_FUNCTION, params, {"global_symbol": PREPACK_FUNCTION}):
        with fb.dataflow():
            outs = [fb.emit(relax.call_tir(pack, relax.Tuple([by_source[weight]]), var.ty))
                    for var, pack, weight in packs]
            out = fb.emit_output(relax.Tuple(outs))
        fb.emit_func_output(out)
    bb.add_func(fb.get()[PREPACK_FUNCTION], PREPACK_FUNCTION)


def _strip(func: tvm.ir.BaseFunc) -> tvm.ir.BaseFunc:
    if isinstance(func, tirx.PrimFunc) and func.attrs is not None and PREPACK_ATTR in func.attrs:
        return func.without_attr(PREPACK_ATTR)
    return func


def _new_params(func: relax.Function, body: relax.Expr,
                packed: dict[tuple[relax.Var, str], relax.Var]) -> list[relax.Var]:
    """``func``'s parameters with each packed weight beside the one it packs, in its place
    where nothing reads the original any more."""
    used = set(relax.analysis.free_vars(body))
    by_weight = defaultdict(list)
    for (weight, _), var in packed.items():
        by_weight[weight].append(var)
    out = []
    for p in func.params:
        if p in used or p not in by_weight:
            out.append(p)
        out.extend(by_weight.get(p, []))
    return out


def _drop_unused(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` without the PrimFuncs no function calls any more (each kernel's unused
    version)."""
    called = set()
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            called |= {gv.name_hint for gv in relax.analysis.all_global_vars(func)}
    keep = {gv: f for gv, f in mod.functions_items()
            if not isinstance(f, tirx.PrimFunc) or gv.name_hint in called}
    return tvm.IRModule(keep, mod.attrs, mod.global_infos)
