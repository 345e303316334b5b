"""BackTexturesWithBuffers: each texture tensor is an image view of a plain pooled buffer.

``LowerAllocTensor`` gives each ``builtin.alloc_tensor`` a storage of its byte count in the
tensor's scope, and ``FoldTextureDeviceIndex`` has pointed the tensor at the GPU's ``global``
vdevice (the VM has one runtime device per role). The VM then asks the OpenCL runtime for a
``global.texture*`` storage of a 1-D shape, which it cannot flatten into an image ("Number of
axes to flatten into rows must be less than shape rank"). And where a storage is an image, the
runtime's pool hands a freed image out again as a plain buffer of the same byte count.

So, as TVM's Adreno flow intends (``DeviceScopeCompatibility.opencl``: Adreno storage is
``global``): each texture storage becomes a ``global`` buffer of the image's backing size
(``DeviceGetMemSize.opencl``, row pitch included), and its tensor names the texture vdevice,
so the VM makes the tensor an image view of that buffer (``AllocTensorScoped``). Run after
``LowerRuntimeBuiltin`` and the passes that stage copies (they read a tensor's device from its
allocation); every texture tensor has a storage of its own here (this pipeline has no static
planner).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

_ALLOC_STORAGE = tvm.ir.Op.get("relax.vm.alloc_storage")  # (size, device, dtype, scope)
_ALLOC_TENSOR = tvm.ir.Op.get("relax.vm.alloc_tensor")  # (storage, offset, shape, dtype[, vdev])


def _texture_scope(call: relax.Call) -> str | None:
    scope = getattr(call.args[3], "value", None)  # a StringImm
    return scope if isinstance(scope, str) and "texture" in scope else None


def _textures(func: relax.Function) -> dict[relax.Var, tuple[str, relax.Call]]:
    """storage var -> (its scope, the one ``alloc_tensor`` made in it)."""
    scopes, tensors = {}, {}
    for block in func.body.blocks:
        for b in block.bindings:
            call = b.value
            if not isinstance(call, relax.Call):
                continue
            if call.op.same_as(_ALLOC_STORAGE) and _texture_scope(call):
                scopes[b.var] = _texture_scope(call)
            elif call.op.same_as(_ALLOC_TENSOR) and call.args[0] in scopes:
                if call.args[0] in tensors:
                    raise ValueError(f"texture storage {call.args[0].name_hint} holds two "
                                     "tensors; BackTexturesWithBuffers needs one per storage")
                tensors[call.args[0]] = (scopes[call.args[0]], call)
    return tensors


@mutator
class _Backer(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.vdevices = list(mod.global_infos.get("vdevice", []))
        self.textures: dict[relax.Var, tuple[str, relax.Call]] = {}
        self.views: dict[relax.Call, int] = {}  # alloc_tensor -> its texture vdevice index
        self.size_of = tvm_ffi.get_global_func("DeviceGetMemSize.opencl")

    def _vdevice(self, scope: str) -> int:
        return next(i for i, v in enumerate(self.vdevices) if v.memory_scope == scope)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        old = binding.value
        if binding.var in self.textures:
            scope, tensor = self.textures[binding.var]
            vdev = self._vdevice(scope)
            shape = [int(x) for x in tensor.args[2].values]
            nbytes = int(self.size_of(shape, tensor.args[3].value, self.vdevices[vdev]))
            value = relax.Call(old.op, [relax.ShapeExpr([nbytes]), old.args[1], old.args[2],
                                        type(old.args[3])("global")], old.attrs, old.ty_args)
            self.views[tensor] = vdev
        elif isinstance(old, relax.Call) and old in self.views:
            index = tvm.tirx.IntImm("int64", self.views[old])
            new = self.visit_expr(old)  # its storage is the new binding
            value = relax.Call(new.op, [*new.args[:4], index], new.attrs, new.ty_args)
        else:
            return super().visit_var_binding_(binding)
        self.set_var_remap(binding.var, self.builder_.emit(value, name_hint=binding.var.name))


@tvm.transform.module_pass(opt_level=0, name="BackTexturesWithBuffers")
class BackTexturesWithBuffers:
    """Make every ``global.texture*`` tensor an image view of a ``global`` buffer (see the
    module)."""

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        backer = _Backer(mod)
        for gvar, func in list(mod.functions.items()):
            if not isinstance(func, relax.Function):
                continue
            backer.textures = _textures(func)
            if backer.textures:
                backer.builder_.update_func(gvar, backer.visit_expr(func))
        return backer.builder_.get()
