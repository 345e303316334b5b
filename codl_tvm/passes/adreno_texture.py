"""UseAdrenoTexture: Adreno's texture ("image") layout for GPU sub-ops.

TVM 0.27's Adreno backend (``relax.backend.adreno``) compiles a whole single-target module:
``ConvertLayout`` to ``NCHW4c``/``OIHW4o``, ``AnnotateCustomMemoryScope``, DLight Adreno rules.
A co-executed module has two targets, so this file does the same restricted to the calls on a
vdevice whose target has the ``texture`` key (the GPU sub-ops and unsplit GPU ops of the
``android-adreno`` pair); CPU sub-ops are never touched.

- :class:`UseAdrenoTexture` (after partitioning, before ``LegalizeOps``): conv2d (groups 1)
  and max_pool2d go to ``NCHW4c`` (conv weights ``OIHW4o``) between a ``layout_transform`` in
  and a ``layout_transform`` out. Channel counts that are not multiples of 4 are zero-padded
  (``nn.pad`` before the layout transform; extra output channels sliced off): zero input
  channels and zero filters add nothing, so every conv2d/pool on the GPU gets the texture
  path. Constant weights are transformed here (numpy), so nothing is left to fold on a device
  the host cannot run. Grouped/depthwise conv2d stay ``NCHW`` (TOPI's ``conv2d_NCHWc_OIHWo``
  and the Adreno DLight rule are written for groups 1); so does avg_pool2d (Adreno's ``Pool2D``
  rule schedules max pooling only, and a texture output needs its 4-lane vector store).

The memory-scope half (which tensors live in images) is :mod:`.texture_scope`.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax import op as rop
from tvm.relax.expr_functor import PyExprMutator, mutator

TEXTURE_KEY = "texture"
BLOCK = 4  # channels per texel (RGBA of a float32 image)
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def is_texture_target(target: tvm.target.Target | None) -> bool:
    """True for Adreno texture-path targets (key ``texture``: qcom/adreno-opencl-texture)."""
    return target is not None and TEXTURE_KEY in list(target.keys)


def _ceil4(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


def _to_nchw4c(bb: relax.BlockBuilder, x: relax.Expr) -> relax.Expr:
    # zero channels up to a multiple of 4 with a pad of its own: a layout_transform with
    # pad_value is not matched by dl.adreno.LayoutTransform, and an unscheduled kernel
    # cannot write an image (it needs 4-lane vector stores)
    channels = int(x.ty.shape[1])
    if _ceil4(channels) != channels:
        x = bb.emit(rop.nn.pad(x, [0, 0, 0, _ceil4(channels) - channels, 0, 0, 0, 0]))
    return bb.emit(rop.layout_transform(x, lambda n, c, h, w: (n, c // BLOCK, h, w, c % BLOCK)))


def _from_nchw4c(bb: relax.BlockBuilder, y5: relax.Expr, channels: int) -> relax.Expr:
    y = rop.layout_transform(y5, lambda n, c, h, w, b: (n, c * BLOCK + b, h, w))
    if _ceil4(channels) == channels:
        return y
    return rop.strided_slice(bb.emit(y), [1], [0], [channels])


def _oihw4o(bb: relax.BlockBuilder, weight: relax.Expr) -> relax.Expr:
    """OIHW -> OIHW4o with O and I zero-padded to multiples of 4 (numpy for constants)."""
    o, i, kh, kw = (int(d) for d in weight.ty.shape)
    op_, ip_ = _ceil4(o), _ceil4(i)
    if isinstance(weight, tvm.ir.Constant):
        value = weight.value.numpy()
        w = np.zeros((op_, ip_, kh, kw), dtype=value.dtype)
        w[:o, :i] = value
        return relax.const(w.reshape(op_ // BLOCK, BLOCK, ip_, kh, kw).transpose(0, 2, 3, 4, 1))
    if ip_ != i:
        weight = bb.emit(rop.nn.pad(weight, [0, 0, 0, ip_ - i, 0, 0, 0, 0]))
    return bb.emit(rop.layout_transform(
        weight, lambda o_, i_, h, w: (o_ // BLOCK, i_, h, w, o_ % BLOCK), pad_value=0.0
    ))


def _conv2d(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr | None:
    attrs = call.attrs
    if (attrs.groups != 1 or attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW"
            or attrs.out_layout != "NCHW"):
        return None
    x5 = _to_nchw4c(bb, call.args[0])
    w5 = _oihw4o(bb, call.args[1])
    y5 = bb.emit(rop.nn.conv2d(
        x5, w5, attrs.strides, attrs.padding, attrs.dilation, 1, "NCHW4c", "OIHW4o", "NCHW4c",
        attrs.out_dtype or None,
    ))
    return _from_nchw4c(bb, y5, int(call.ty.shape[1]))


def _max_pool2d(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr | None:
    attrs = call.attrs
    if attrs.layout != "NCHW" or attrs.out_layout != "NCHW":
        return None
    x5 = _to_nchw4c(bb, call.args[0])
    y5 = bb.emit(rop.nn.max_pool2d(x5, attrs.pool_size, attrs.strides, attrs.padding,
                                   attrs.dilation, attrs.ceil_mode, layout="NCHW4c",
                                   out_layout="NCHW4c"))
    return _from_nchw4c(bb, y5, int(call.ty.shape[1]))


# op -> rewrite into NCHW4c (None from a rule: the call stays as it is)
REWRITES = {"relax.nn.conv2d": _conv2d, "relax.nn.max_pool2d": _max_pool2d}


@mutator
class _LayoutRewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, force: bool):
        super().__init__(mod)
        self.vdevices = list(mod.global_infos["vdevice"])
        self.force = force

    def _on_texture(self, call: relax.Call) -> bool:
        vdev = getattr(call.ty, "vdevice", None)
        if vdev is None:
            return False
        if self.force:  # tests: treat the GPU role (vdevice 0) as a texture device
            return tvm_ffi.structural_equal(vdev, self.vdevices[0])
        return is_texture_target(vdev.target)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        rule = REWRITES.get(getattr(call.op, "name", None))
        if rule is None:
            return call
        call = self.builder_.normalize(call)
        if not self._on_texture(call) or len(call.ty.shape) != 4:
            return call
        new = rule(self.builder_, call)
        return call if new is None else new


@tvm.transform.module_pass(opt_level=0, name="UseAdrenoTexture")
class UseAdrenoTexture:
    """Rewrite the GPU's conv2d/pool2d calls to Adreno's ``NCHW4c``/``OIHW4o`` layouts.

    Parameters
    ----------
    force : bool
        Rewrite the calls on vdevice 0 (the GPU role) whatever its target: the rewrite is
        target independent, so tests check its numbers on the ``cpu-pair``.
    """

    def __init__(self, force: bool = False):
        self.force = force

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if "vdevice" not in mod.global_infos:
            return mod
        rewriter = _LayoutRewriter(mod, self.force)
        for gvar, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
        return rewriter.builder_.get()


# ---- memory scopes ------------------------------------------------------------------------
# kernels, named by their main block (what the Adreno DLight rules match on), that may read
# argument 0 from a texture; TEXTURE_WRITERS may also write their output to one: their rules
# store whole texels. dl.adreno.Pool2D puts the reduction loop inside its vectorized loop, so
# the texel store of a max pool is not vectorized (TVM 0.27): pools read images, write buffers.
