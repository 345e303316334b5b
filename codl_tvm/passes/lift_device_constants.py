"""LiftDeviceConstants: turn the tensor constants kernels read into parameters of ``main``.

The Relax VM loads every constant onto ``devices[0]`` (apache/tvm#17884), the GPU of our pairs,
so weights a CPU kernel reads cannot stay constants. All kernel constants are lifted into
trailing parameters, each typed on the vdevice of the kernel that reads it (a weight both
devices read is lifted once per device); :class:`codl_tvm.Executable` uploads them once at load
time, so no weight is copied per inference, and the compiled library carries no weights.
Run after :class:`BindKernelTargets`.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..device import vdevice_index
from .bind_kernel_targets import call_tir_out, type_vdevice

LIFTED_ATTR = "codl.lifted_params"
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


@mutator
class _Lifter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.vdevices = list(mod.global_infos["vdevice"])
        self.params: list[relax.Var] = []
        self.values: dict[str, tvm.runtime.Tensor] = {}
        self.seen: dict[tuple[tvm.runtime.Tensor, int], relax.Var] = {}

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not call.op.same_as(_CALL_TIR):
            return call
        dev = vdevice_index(self.vdevices, type_vdevice(call.ty_args[0])) or 0
        args = [self._lift(a, dev) for a in call.args[1].fields]
        return relax.call_tir(call.args[0], relax.Tuple(args), call_tir_out(call.ty_args[0]))

    def _lift(self, arg: relax.Expr, dev: int) -> relax.Expr:
        if not isinstance(arg, tvm.ir.Constant):
            return arg
        key = (arg.value, dev)
        if key not in self.seen:
            name = f"codl_w{len(self.params)}_d{dev}"
            ty = relax.TensorType(arg.value.shape, arg.value.dtype, self.vdevices[dev])
            var = relax.Var(name, ty)
            self.params.append(var)
            self.values[name] = arg.value
            self.seen[key] = var
        return self.seen[key]


@tvm.transform.module_pass(opt_level=0, name="LiftDeviceConstants")
class LiftDeviceConstants:
    """Lift the constants kernels read into parameters of ``main``, on the reading device.

    The lifted values are kept in the module attribute ``codl.lifted_params`` (name -> tensor)
    in parameter order.
    """

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if "vdevice" not in mod.global_infos:
            return mod
        gv = mod.get_global_var("main")
        lifter = _Lifter(mod)
        func = lifter.visit_expr(mod[gv])
        if not lifter.params:
            return mod
        new_func = relax.Function(
            list(func.params) + lifter.params, func.body, func.ret_ty, func.is_pure, func.attrs
        )
        mod = mod.clone()
        mod[gv] = new_func
        return mod.with_attr(LIFTED_ATTR, lifter.values)
