"""BindKernelTargets: give every legalized kernel its own PrimFunc on its own device.

``LegalizeOps`` (TVM 0.27) drops the vdevice of some outputs (conv2d's) and leaves their
PrimFuncs without a ``target``; it also shares one PrimFunc between calls of the same shape on
different devices. This pass reads each ``call_tir``'s device from its arguments, puts the output
type back on that vdevice, and binds a per-device copy of the PrimFunc to the device's target.
Run it right after ``LegalizeOps``.
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..device import vdevice_index

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


@mutator
class _Binder(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod = mod
        self.vdevices = list(mod.global_infos["vdevice"])
        self.index: dict[relax.Var, int] = {}
        self.copies: dict[tuple[str, int], tvm.ir.GlobalVar] = {}

    def _dev_of(self, expr: relax.Expr) -> int | None:
        if isinstance(expr, relax.Var) and expr in self.index:
            return self.index[expr]
        ty = getattr(expr, "ty", None)
        return vdevice_index(self.vdevices, type_vdevice(ty) if ty is not None else None)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self.visit_expr(binding.value)
        dev = None
        if isinstance(value, relax.Call) and value.op.same_as(_CALL_TIR):
            args = list(value.args[1].fields)
            found = [d for d in map(self._dev_of, args) if d is not None]
            dev = found[0] if found else vdevice_index(self.vdevices, _out_vdev(value)) or 0
            value = self._bind_call(value, dev)
        new = self.builder_.emit(value, name_hint=binding.var.name) if isinstance(
            binding.var, relax.DataflowVar
        ) or not self.builder_.current_block_is_dataflow() else self.builder_.emit_output(
            value, name_hint=binding.var.name
        )
        dev = dev if dev is not None else self._dev_of(new)
        if dev is not None:
            self.index[new] = dev
        self.set_var_remap(binding.var, new)

    def _bind_call(self, call: relax.Call, dev: int) -> relax.Call:
        gvar = call.args[0]
        vdev = self.vdevices[dev]
        key = (gvar.name_hint, dev)
        if key not in self.copies:
            func = self.mod[gvar]
            name = f"{gvar.name_hint}_d{dev}"
            bound = func.with_attr("target", vdev.target).with_attr("global_symbol", name)
            self.copies[key] = self.builder_.add_func(bound, name)
        return relax.call_tir(self.copies[key], call.args[1],
                              call_tir_out(on_vdevice(call.ty_args[0], vdev)))


def _out_vdev(call: relax.Call) -> relax.VDevice | None:
    return type_vdevice(call.ty_args[0])


def on_vdevice(ty: relax.Type, vdev: relax.VDevice) -> relax.Type:
    """``ty`` with every tensor in it on ``vdev`` (kernels with tuple outputs: split...)."""
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([on_vdevice(f, vdev) for f in ty.fields])
    return relax.TensorType(ty.shape, ty.dtype, vdev)


def call_tir_out(ty: relax.Type) -> relax.TensorType | list[relax.TensorType]:
    """``relax.call_tir``'s ``out_ty`` argument for a kernel output type."""
    return list(ty.fields) if isinstance(ty, relax.TupleType) else ty


def type_vdevice(ty: relax.Type) -> relax.VDevice | None:
    """The vdevice of a tensor type, or of a tuple type's first tensor."""
    if isinstance(ty, relax.TupleType):
        return type_vdevice(ty.fields[0]) if len(ty.fields) else None
    return getattr(ty, "vdevice", None) if ty is not None else None


@tvm.transform.module_pass(opt_level=0, name="BindKernelTargets")
class BindKernelTargets:
    """Bind each ``call_tir`` kernel to the target of the device its arguments live on."""

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if "vdevice" not in mod.global_infos:
            return mod
        binder = _Binder(mod)
        for gvar, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                binder.builder_.update_func(gvar, binder.visit_expr(func))
        out = binder.builder_.get()
        # drop the originals: every call now names a per-device copy
        used = _called(out)
        keep = {gv: f for gv, f in out.functions.items()
                if not isinstance(f, tirx.PrimFunc) or gv.name_hint in used}
        return tvm.IRModule(keep, attrs=out.attrs, global_infos=out.global_infos)


def _called(mod: tvm.IRModule) -> set[str]:
    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, tvm.ir.GlobalVar):
            names.add(node.name_hint)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return names
