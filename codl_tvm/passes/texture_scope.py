"""Texture memory scopes for the Adreno path of :mod:`.adreno_texture` (after legalization).

- :class:`AnnotateTextureScope` (after ``LegalizeOps`` + ``BindKernelTargets``): puts the 5-D
  ``(..., 4)`` tensors that only texture-capable GPU kernels read on a ``global.texture*``
  vdevice and specializes those kernels' buffers to that scope, as Adreno's
  ``AnnotateCustomMemoryScope`` + ``SpecializePrimFuncBasedOnCallSite`` do. Those passes cannot
  be used here: the first rebuilds the module's vdevice list from its one target (dropping the
  CPU vdevice) and annotates every call, CPU ones included; the second rewrites each callee in
  place, so a kernel called with two scope combinations keeps only the last.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from .adreno_texture import _CALL_TIR, BLOCK, is_texture_target
from .bind_kernel_targets import _called, call_tir_out, type_vdevice

TEXTURE_KERNELS = {"conv2d_NCHWc": str.startswith, "pool_max": str.__eq__,
                   "te_layout_transform": str.__eq__}
TEXTURE_WRITERS = ("conv2d_NCHWc", "te_layout_transform")


def texture_scope(shape: list[int], target: tvm.target.Target) -> str:
    """Adreno's scope for a 5-D ``(a0, a1, a2, a3, 4)`` tensor (AnnotateCustomMemoryScope)."""
    spatial = int(target.attrs.get("texture_spatial_limit", 16384))
    depth = int(target.attrs.get("texture_depth_limit", 2048))
    a0, a1, a2, a3 = shape[:4]
    if a0 < spatial and a1 * a2 * a3 < spatial:
        return "global.texture-weight"
    if a0 < depth and a1 < spatial and a2 * a3 < spatial:
        return "global.texture-nhwc"
    if a0 * a1 < depth and a2 < spatial and a3 < spatial:
        return "global.texture"
    return "global"


def _kernel_kind(func: tirx.PrimFunc) -> str | None:
    from ..schedules.analysis import leaf_blocks

    names = [b.name_hint for b in leaf_blocks(func)]
    return next((k for k, match in TEXTURE_KERNELS.items() if any(match(n, k) for n in names)),
                None)


class _ScopePlanner:
    """Which call_tir outputs go to texture: written by a texture kernel on a texture device,
    read only as argument 0 of texture kernels (all-or-nothing: no copies are inserted)."""

    def __init__(self, mod: tvm.IRModule, func: relax.Function):
        self.mod = mod
        self.producer: dict[relax.Var, relax.Call] = {}
        self.uses: dict[relax.Var, list[tuple[tvm.ir.GlobalVar, int] | None]] = {}
        for block in func.body.blocks:
            for b in block.bindings:
                self._note(b.var, b.value)
        self._use_all(func.body.body, None)

    def _note(self, var: relax.Var, value: relax.Expr) -> None:
        if isinstance(value, relax.Call) and value.op.same_as(_CALL_TIR):
            self.producer[var] = value
            for i, arg in enumerate(value.args[1].fields):
                self.uses.setdefault(arg, []).append((value.args[0], i))
        else:
            self._use_all(value, None)

    def _use_all(self, expr: relax.Expr, use: None) -> None:
        relax.analysis.post_order_visit(
            expr, lambda n: self.uses.setdefault(n, []).append(use) if isinstance(
                n, relax.Var) else None)

    def scope(self, var: relax.Var) -> str | None:
        call = self.producer.get(var)
        vdev = type_vdevice(call.ty_args[0]) if call is not None else None
        ty = call.ty_args[0] if call is not None else None
        if (vdev is None or not is_texture_target(vdev.target) or not isinstance(
                ty, relax.TensorType) or len(ty.shape) != 5 or int(ty.shape[4]) != BLOCK
                or _kernel_kind(self.mod[call.args[0]]) not in TEXTURE_WRITERS):
            return None
        for use in self.uses.get(var, [None]):
            if use is None or use[1] != 0 or _kernel_kind(self.mod[use[0]]) is None:
                return None
        scope = texture_scope([int(d) for d in ty.shape], vdev.target)
        return scope if scope != "global" else None


@tvm.transform.module_pass(opt_level=0, name="AnnotateTextureScope")
class AnnotateTextureScope:
    """Put GPU tensors in ``NCHW4c`` between texture kernels into Adreno image memory.

    Run after ``LegalizeOps`` and ``BindKernelTargets``. The new vdevices (one per scope) are
    appended to the module's vdevice list; :func:`fold_texture_device_index` maps their
    allocations back to the GPU's runtime device.
    """

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if "vdevice" not in mod.global_infos:
            return mod
        vdevices = list(mod.global_infos["vdevice"])
        gv = mod.get_global_var("main")
        planner = _ScopePlanner(mod, mod[gv])
        scoped: dict[relax.Var, relax.VDevice] = {}
        for var, call in planner.producer.items():
            scope = planner.scope(var)
            if scope is None:
                continue
            base = type_vdevice(call.ty_args[0])
            found = [v for v in vdevices if v.memory_scope == scope and tvm_ffi.structural_equal(
                v.target, base.target) and v.vdevice_id == base.vdevice_id]
            if not found:
                vdevices.append(relax.VDevice(base.target, base.vdevice_id, scope))
            scoped[var] = found[0] if found else vdevices[-1]
        if not scoped:
            return mod
        mod = mod.clone()
        mod.update_global_info("vdevice", vdevices)
        out = _Scoper(mod, scoped).run(gv)
        used = _called(out)  # the unspecialized kernels no call names any more
        keep = {g: f for g, f in out.functions.items()
                if not isinstance(f, tirx.PrimFunc) or g.name_hint in used}
        return tvm.IRModule(keep, attrs=out.attrs, global_infos=out.global_infos)


@tvm.transform.module_pass(opt_level=0, name="CheckTextureWriters")
class CheckTextureWriters:
    """Fail when a kernel that writes an image was left unscheduled by the Adreno rules.

    An image store takes a whole texel (4 lanes); only the ``dl.adreno`` rules vectorize the
    store that way, and a generic schedule would compile into wrong image writes.
    Run right after ``dl.ApplyDefaultSchedule(dl.adreno...)``.
    """

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        for gvar, func in mod.functions.items():
            if not isinstance(func, tirx.PrimFunc) or (func.attrs or {}).get("tirx.is_scheduled"):
                continue
            if any(p.scope().startswith("global.texture") for p in func.params[-1:]):
                raise RuntimeError(f"{gvar.name_hint}: writes a texture but no Adreno schedule "
                                   "rule took it (UseAdrenoTexture produced an unsupported op)")
        return mod


@mutator
class _Scoper(PyExprMutator):
    """Retype the scoped outputs and give each kernel a copy specialized to its call's scopes."""

    def __init__(self, mod: tvm.IRModule, scoped: dict[relax.Var, relax.VDevice]):
        super().__init__(mod)
        self.mod, self.scoped = mod, scoped
        self.copies: dict[tuple[str, tuple[str, ...]], tvm.ir.GlobalVar] = {}

    def run(self, gv: tvm.ir.GlobalVar) -> tvm.IRModule:
        self.builder_.update_func(gv, self.visit_expr(self.mod[gv]))
        return self.builder_.get()

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self.visit_expr(binding.value)
        vdev = self.scoped.get(binding.var)
        if isinstance(value, relax.Call) and value.op.same_as(_CALL_TIR):
            out = value.ty_args[0]
            if vdev is not None:
                out = relax.TensorType(out.shape, out.dtype, vdev)
            value = self._specialize(value, out)
        new = self.builder_.emit(value, name_hint=binding.var.name) if isinstance(
            binding.var, relax.DataflowVar) else self.builder_.emit_output(
            value, name_hint=binding.var.name)
        self.set_var_remap(binding.var, new)

    def _specialize(self, call: relax.Call, out: relax.Type) -> relax.Call:
        args = list(call.args[1].fields)
        types = [a.ty for a in args] + [out]
        scopes = tuple(getattr(type_vdevice(t), "memory_scope", "global") for t in types)
        if all(s == "global" for s in scopes):
            return relax.call_tir(call.args[0], call.args[1], call_tir_out(out))
        key = (call.args[0].name_hint, scopes)
        if key not in self.copies:
            func = self.mod[call.args[0]]
            # TIR params are buffers here: re-declare each one in its call's scope
            params = {p: tirx.decl_buffer(p.shape, p.dtype, p.name, scope=s)
                      for p, s in zip(func.params, scopes)}
            name = f"{call.args[0].name_hint}_tex{len(self.copies)}"
            new = func.specialize(params).with_attr("global_symbol", name)
            self.copies[key] = self.builder_.add_func(new, name)
        return relax.call_tir(self.copies[key], call.args[1], call_tir_out(out))


_ALLOC_TENSOR = tvm.ir.Op.get("relax.builtin.alloc_tensor")


@mutator
class _DeviceFolder(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, to_base: dict[int, int]):
        super().__init__(mod)
        self.to_base = to_base

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not call.op.same_as(_ALLOC_TENSOR) or int(call.args[2].value) not in self.to_base:
            return call
        index = tvm.tirx.IntImm("int64", self.to_base[int(call.args[2].value)])
        return relax.Call(call.op, [call.args[0], call.args[1], index, *call.args[3:]],
                          call.attrs, call.ty_args)


@tvm.transform.module_pass(opt_level=0, name="FoldTextureDeviceIndex")
class FoldTextureDeviceIndex:
    """Allocate texture tensors on the runtime device of their ``global`` vdevice.

    ``CallTIRRewrite`` allocates each output on the device whose *position* in the vdevice
    list matches its vdevice, and the texture vdevices come after the pair's two, while the VM
    (and an artifact's manifest) has one runtime device per role. The scope string stays, so
    the VM still allocates an image (``AllocDataSpace`` with ``global.texture*``). Run right
    after ``CallTIRRewrite``.
    """

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        vdevices = list(mod.global_infos.get("vdevice", []))
        to_base = {}
        for i, vdev in enumerate(vdevices):
            if vdev.memory_scope == "global":
                continue
            base = [j for j, v in enumerate(vdevices) if v.memory_scope == "global"
                    and v.vdevice_id == vdev.vdevice_id
                    and tvm_ffi.structural_equal(v.target, vdev.target)]
            to_base[i] = base[0] if base else 0
        if not to_base:
            return mod
        folder = _DeviceFolder(mod, to_base)
        for gvar, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                folder.builder_.update_func(gvar, folder.visit_expr(func))
        return folder.builder_.get()


def _void_store(call: tvm.ir.Call) -> tvm.ir.Call:
    if not call.op.same_as(tvm.ir.Op.get("tirx.texture2d_store")) or isinstance(
            call.ty, tvm.ir.PrimType):
        return call
    return tvm.ir.Call(call.op, list(call.args), call.attrs, span=call.span, ret_ty="void")


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="TypeTextureStores")
def TypeTextureStores(func: tirx.PrimFunc, _mod: tvm.IRModule, _ctx: object) -> tirx.PrimFunc:
    """Give ``texture2d_store`` calls a void PrimType (run right after ``TextureFlatten``).

    TVM 0.27's ``TextureFlatten`` types them with the image's *pointer* type, and
    ``VectorizeLoop`` then declines to vectorize non-PrimType calls: the texel store is
    scalarized into 4 stores of one broadcast lane each (wrong image contents).
    """
    return func.with_body(tvm_ffi.structural_map(func.body, [(tvm.ir.Call, _void_store)]))
