"""The CPU's exp, erf, tanh, softmax and GELU legalize to TVM's fast approximations (which
vectorize); the GPU's calls keep their functions; outputs stay within 1e-5 of exact."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, tirx
from tvm.relax import op as rop

import codl_tvm
from codl_tvm.device import DevicePair
from codl_tvm.pipeline import codl_pipeline
from codl_tvm.tiling.variants import KernelVariants, use_variants
from tests.helpers import const, reference, single_function

LIBM = {"exp", "erf", "tanh"}


def _model(seed: int = 0) -> tvm.IRModule:
    """A transformer block's nonlinear ops: erf-form GELU (as exporters write it), relax's
    own GELU, softmax, tanh and exp."""
    rng = np.random.default_rng(seed)

    def body(bb, x):
        y = bb.emit(rop.matmul(x, const(rng, (64, 64))))
        erf = bb.emit(rop.erf(bb.emit(rop.divide(y, relax.const(np.float32(2 ** 0.5))))))
        gelu = bb.emit(rop.multiply(bb.emit(rop.multiply(y, relax.const(np.float32(0.5)))),
                                    bb.emit(rop.add(erf, relax.const(np.float32(1.0))))))
        soft = bb.emit(rop.nn.softmax(gelu, axis=-1))
        rest = bb.emit(rop.add(bb.emit(rop.tanh(y)), bb.emit(rop.nn.gelu(y))))
        return rop.add(soft, bb.emit(rop.add(rest, bb.emit(rop.exp(rop.negative(rop.abs(y)))))))

    return single_function((1, 16, 64), body)


def _calls(mod: tvm.IRModule) -> dict[str, set[str]]:
    """Per kernel target kind, which of exp, erf and tanh its PrimFuncs call (TVMScript
    prints them ``T.exp(...)``)."""
    found: dict[str, set[str]] = {}
    for _, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc) and "target" in func.attrs:
            text = func.script()
            found.setdefault(func.attrs["target"].kind.name, set()).update(
                name for name in LIBM if f"T.{name}(" in text)
    return found


def _legalized(pair: DevicePair, place: str, fast: bool) -> dict[str, set[str]]:
    mod = _model()
    with use_variants(KernelVariants(cpu_fast_math=fast)):
        out = codl_pipeline(pair, codl_tvm.Plan.single(mod, place), until="legalize")(mod)
    return _calls(out)


@pytest.mark.parametrize("fast", [True, False])
def test_cpu_kernels_call_no_scalar_library_function_unless_asked(fast):
    calls = _legalized(DevicePair.preset("cpu-pair"), "cpu", fast)["llvm"]
    assert (calls & LIBM == set()) if fast else (LIBM <= calls)


def test_gpu_kernels_keep_their_own_functions():
    pair = DevicePair("x86-cuda", {"kind": "llvm"}, {"kind": "cuda", "arch": "sm_90"})
    calls = _legalized(pair, "gpu", True)
    assert LIBM <= calls["cuda"] and "llvm" not in calls


@pytest.mark.parametrize("ratio", [None, 0.5])
def test_fast_math_output_matches_exact_and_plain_tvm(ratio):
    mod = _model(seed=3)
    pair = DevicePair.preset("cpu-pair")
    plan = (codl_tvm.Plan.single(mod, "cpu") if ratio is None
            else codl_tvm.Plan.uniform(mod, dim="OC", ratio=ratio))
    x = np.random.default_rng(1).standard_normal((1, 16, 64)).astype("float32")
    outs = [codl_tvm.compile(mod, pair, plan, variants=KernelVariants(cpu_fast_math=f))
            .run({"x": x})[0] for f in (True, False)]
    ref = reference(mod, {"x": x})[0]
    for out in outs:
        assert np.abs(out - ref).max() / np.abs(ref).max() <= 1e-5
