"""Small models and a reference runner shared by the tests."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import tvm
from tvm import relax
from tvm.relax import op as rop

LLVM = {"kind": "llvm"}
AVX2 = {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}  # 8 lanes, 16 vector registers
ROOT = Path(__file__).resolve().parent.parent


def load_benchmark(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    # registered before it runs, as an import would: a dataclass looks its module up
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def const(rng: np.random.Generator, shape: tuple[int, ...]) -> relax.Expr:
    return relax.const(rng.standard_normal(shape).astype("float32"))


def single_function(x_shape, body) -> tvm.IRModule:
    """A module whose main(x) is ``body(bb, x)`` inside a dataflow block."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(body(bb, x))
        bb.emit_func_output(out)
    return bb.get()


def reference(mod: tvm.IRModule, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The unsplit model run by plain TVM on the CPU."""
    exe = tvm.compile(mod, target=tvm.target.Target(LLVM))
    vm = relax.VirtualMachine(exe, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(v) for v in inputs.values()])
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


def conv(bb, x, rng, oc, k, stride=1, dilation=1, padding=(0, 0, 0, 0), groups=1, bias=False):
    ic = int(x.ty.shape[1])
    y = bb.emit(rop.nn.conv2d(x, const(rng, (oc, ic // groups, k, k)), strides=stride,
                              padding=padding, dilation=dilation, groups=groups))
    if bias:
        y = bb.emit(rop.add(y, const(rng, (1, oc, 1, 1))))
        y = bb.emit(rop.nn.relu(y))
    return y


@dataclasses.dataclass(frozen=True)
class Regs:
    """A CPU's SIMD shape, as the tile rules read it (``tiling.common.Simd``)."""

    lanes: int
    vector_regs: int
    cores: int = 2


def pointwise(ic: int, oc: int, h: int, w: int):
    """A stride-1 1x1 conv's shape (``tiling.ConvShape``)."""
    from codl_tvm.tiling import ConvShape

    return ConvShape(1, ic, oc, h, w, 1, 1)
