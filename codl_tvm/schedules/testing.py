"""Helpers shared by the schedule tests and benchmarks: one-op PrimFuncs and checks."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.relax import op as rop

from .apply import ApplySchedules

CPU_TARGET = {"kind": "llvm", "num-cores": 2}
# AVX-512 lanes, for checks of what the schedules build for wide vectors; a kernel built for it
# runs only where the host has AVX-512 (:func:`runnable_here`)
AVX512_TARGET = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}


def runnable_here(target: dict) -> dict:
    """``target``, or, where it may use instructions this host's CPU lacks (an AVX-512 target
    on an AVX2 host dies of SIGILL), the same target for this host's CPU (LLVM's name for it):
    a check that runs a kernel runs the widest one this machine can."""
    from tvm.target import codegen

    host = {**target, "mcpu": codegen.llvm_get_system_cpu()}
    want = codegen.llvm_get_cpu_features(tvm.target.Target(target))
    have = codegen.llvm_get_cpu_features(tvm.target.Target(host))
    return target if set(want) <= set(have) else host


def _legalized(params: list[tuple[str, tuple[int, ...]]], body: Callable, fuse: bool):
    bb = relax.BlockBuilder()
    rvars = [relax.Var(n, relax.TensorType(s, "float32")) for n, s in params]
    with bb.function("main", rvars):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(body(bb, *rvars)))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    if fuse:
        mod = relax.transform.AnnotateTIROpPattern()(mod)
        mod = relax.transform.FuseOps()(mod)
        mod = relax.transform.FuseTIR()(mod)
    funcs = [f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)]
    if len(funcs) != 1:
        raise ValueError(f"expected one PrimFunc, got {len(funcs)}")
    return funcs[0]


def op_func(
    params: list[tuple[str, tuple[int, ...]]], body: Callable, fuse: bool = False
) -> tirx.PrimFunc:
    """Legalized PrimFunc of ``body(bb, *param_vars)``: any Relax op(s), for checks of ops
    the schedules must recognise, or must leave alone."""
    return _legalized(params, body, fuse)


def conv2d_func(
    x: tuple[int, ...], w: tuple[int, ...], *, bias_relu: bool = False, **attrs
) -> tirx.PrimFunc:
    """Legalized NCHW conv2d (optionally + bias + ReLU fused after it)."""
    params = [("x", x), ("w", w)] + ([("b", (1, w[0], 1, 1))] if bias_relu else [])

    def body(bb, xv, wv, *rest):
        y = rop.nn.conv2d(xv, wv, **attrs)
        if bias_relu:
            y = rop.nn.relu(rop.add(bb.emit(y), rest[0]))
        return y

    return _legalized(params, body, fuse=bias_relu)


def pool2d_func(x: tuple[int, ...], kind: str, **attrs) -> tirx.PrimFunc:
    """Legalized max_pool2d / avg_pool2d."""
    fn = rop.nn.max_pool2d if kind == "max" else rop.nn.avg_pool2d
    return _legalized([("x", x)], lambda bb, xv: fn(xv, **attrs), fuse=False)


def matmul_func(m: int, k: int, n: int, *, bias_relu: bool = False, lead: int = 0
                ) -> tirx.PrimFunc:
    """Legalized (M,K) x (K,N) matmul (optionally + bias + ReLU fused); ``lead`` unit batch
    axes in front of the activation (a transformer's [1, M, K] dense input)."""
    params = [("a", (*(1,) * lead, m, k)), ("b", (k, n))] + (
        [("c", (1, n))] if bias_relu else [])

    def body(bb, a, b, *rest):
        y = rop.matmul(a, b)
        return rop.nn.relu(rop.add(bb.emit(y), rest[0])) if bias_relu else y

    return _legalized(params, body, fuse=bias_relu)


def matmul_gelu_func(a: tuple[int, ...], n: int, seed: int = 0) -> tirx.PrimFunc:
    """Legalized and fused ``gelu(a @ b + bias)`` with GELU in the erf form exporters write,
    ``x / 2 * (1 + erf(x / sqrt 2))``, which reads the dense layer's value twice."""
    bias = relax.const(np.random.default_rng(seed).standard_normal((n,)).astype("float32"))

    def body(bb, x, w):
        y = bb.emit(rop.add(bb.emit(rop.matmul(x, w)), bias))
        erf = bb.emit(rop.erf(bb.emit(rop.divide(y, relax.const(np.float32(2 ** 0.5))))))
        half = bb.emit(rop.multiply(y, relax.const(np.float32(0.5))))
        return rop.multiply(half, bb.emit(rop.add(erf, relax.const(np.float32(1.0)))))

    return op_func([("a", a), ("b", (a[-1], n))], body, fuse=True)


def with_target(func: tirx.PrimFunc, target: dict | tvm.target.Target) -> tirx.PrimFunc:
    t = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    return func.with_attr("target", t)


def schedule(func: tirx.PrimFunc, target: dict | tvm.target.Target) -> tirx.PrimFunc:
    """Run :class:`ApplySchedules` on ``func`` bound to ``target``."""
    mod = ApplySchedules()(tvm.IRModule({"main": with_target(func, target)}))
    return mod["main"]


def build(func: tirx.PrimFunc, target: dict | tvm.target.Target):
    t = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    func = func.with_attr("global_symbol", "main").without_attr("target")
    return tvm.compile(tvm.IRModule({"main": func}), target=t)


def random_args(func: tirx.PrimFunc, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.uniform(-1, 1, [int(s) for s in p.shape]).astype(str(p.dtype))
        for p in func.params[:-1]
    ]


def run(lib, func: tirx.PrimFunc, args: list[np.ndarray]) -> np.ndarray:
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in args]
    out = tvm.runtime.empty([int(s) for s in func.params[-1].shape], "float32", dev)
    lib["main"](*tensors, out)
    return out.numpy()


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


# The unscheduled reference is built without LLVM's optimizer: at the default level LLVM's
# vectorizer emits invalid IR for some legalized avg pools (1x4x4x3, 2x2 window, stride 1,
# padding (1, 0, 1, 0): "Instruction does not dominate all uses"), which has nothing to do
# with the schedule under test.
REFERENCE_TARGET = {"kind": "llvm", "opt-level": 0}


def check_cpu(func: tirx.PrimFunc, target: dict | None = None, seed: int = 0) -> float:
    """Relative error of the scheduled ``func`` against the unscheduled one on llvm, both run
    here (``target`` made :func:`runnable_here`)."""
    target = runnable_here(target or CPU_TARGET)
    new = schedule(func, target)
    args = random_args(func, seed)
    want = run(build(func, REFERENCE_TARGET), func, args)
    got = run(build(new, target), new, args)
    return rel_error(got, want)


def parallel_extents(func: tirx.PrimFunc) -> list[int]:
    """Extents of the parallel loops of a scheduled CPU PrimFunc."""
    from .gpu_rules import _children

    found: list[int] = []
    stack = [func.body]
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, tirx.For) and int(stmt.kind) == int(tirx.ForKind.PARALLEL):
            found.append(int(stmt.extent))
        stack.extend(_children(stmt))
    return found
