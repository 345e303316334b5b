"""The CPU's exp, erf, tanh, softmax and GELU as TVM's fast approximations (``topi.fast_*``).

LLVM has no vector form of ``erff`` and, without a vector math library, turns a vector
``llvm.exp`` into one ``expf`` call per lane: the transformer ops that read them (GELU's erf,
softmax's exp) ran one element at a time. TVM's ``topi.fast_exp`` / ``fast_erf`` /
``fast_tanh`` are polynomials in plain arithmetic that vectorize (TVM's own
``FastMathTransform`` uses them for every target). Here they legalize only the calls placed on
an ``llvm`` device, so GPU kernels keep the GPU's own functions; the rest legalize as TVM does.
``KernelVariants(cpu_fast_math=False)`` keeps the exact functions on the CPU too.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import tvm
from tvm import relax, te, tirx, topi

from ..tiling import current_variants
from .bind_kernel_targets import type_vdevice

Legalize = Callable[[relax.BlockBuilder, relax.Call], relax.Expr]


def _fast_gelu(x: te.Tensor) -> te.Tensor:
    half = tirx.const(0.5, x.dtype)
    erf = topi.fast_erf(topi.multiply(x, tirx.const(math.sqrt(0.5), x.dtype)))
    return topi.multiply(x, topi.add(half, topi.multiply(erf, half)))


# relax op -> how its CPU call is computed: one table, the ops this legalization owns
FAST_CPU_MATH: dict[str, Legalize] = {
    "relax.exp": lambda bb, call: bb.call_te(topi.fast_exp, call.args[0]),
    "relax.erf": lambda bb, call: bb.call_te(topi.fast_erf, call.args[0]),
    "relax.tanh": lambda bb, call: bb.call_te(topi.fast_tanh, call.args[0]),
    "relax.nn.softmax": lambda bb, call: bb.call_te(
        topi.nn.fast_softmax, call.args[0], int(call.attrs.axis)),
    "relax.nn.gelu": lambda bb, call: bb.call_te(_fast_gelu, call.args[0],
                                                 primfunc_name_hint="gelu"),
}


def on_cpu(call: relax.Call) -> bool:
    """Whether ``call`` runs on an ``llvm`` device: its result's vdevice after
    ``RealizeVDevice``, else its input's (a module without vdevices is left alone)."""
    vdev = type_vdevice(call.ty) or type_vdevice(getattr(call.args[0], "ty", None))
    return vdev is not None and vdev.target.kind.name == "llvm"


def _legalize(name: str) -> Legalize:
    fast = FAST_CPU_MATH[name]

    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        if on_cpu(call) and getattr(call.ty, "dtype", None) in ("float32", "float16"):
            return fast(bb, call)
        return tvm.ir.Op.get(name).get_attr("FLegalize")(bb, call)

    return legalize


def cpu_fast_math_legalizations() -> dict[str, Legalize]:
    """``LegalizeOps``' customize map for the current kernel variants (empty when
    ``cpu_fast_math`` is off)."""
    if not current_variants().cpu_fast_math:
        return {}
    return {name: _legalize(name) for name in FAST_CPU_MATH}
