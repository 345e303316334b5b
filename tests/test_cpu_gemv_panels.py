"""A GEMV whose weight is a constant reads it packed at load into panels, N padded to whole
panels (``KernelVariants.cpu_gemv_panels``); a weight that is not a constant is streamed as
it is. Both equal the unscheduled PrimFunc and the unsplit model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
from helpers import const, reference, rel_err, single_function
from tvm.relax import op as rop

import codl_tvm
from codl_tvm import tiling
from codl_tvm.plan import Plan
from codl_tvm.schedules import blocking_of, prepack
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.analysis import analyze
from codl_tvm.schedules.cpu_rules import gemv_panel
from codl_tvm.schedules.dispatch import RULES
from codl_tvm.schedules.target_info import target_info

AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
TOL = 1e-5


def _versions(func, **variants):
    target = tvm.target.Target(func.attrs["target"])
    (row,) = [r for r in RULES if r.name == "cpu-matmul"]
    with tiling.use_variants(**variants), prepack.capture() as box:
        row.apply(func, analyze(func), target, target_info(target), row.name)
    return box


@pytest.mark.parametrize("m, k, n, target", [
    (1, 64, 37, T.CPU_TARGET), (2, 40, 1000, AVX512), (4, 33, 64, AVX512), (1, 16, 5, AVX512),
])  # fmt: skip
def test_the_version_for_a_constant_weight_reads_padded_panels(m, k, n, target):
    func = T.with_target(T.matmul_func(m, k, n, bias_relu=True), target)
    assert blocking_of(T.schedule(func, target)).algorithm in ("gemv", "gemm")  # streamed
    box = _versions(func)
    nr = gemv_panel(target_info(tvm.target.Target(target)))
    assert [int(d) for d in box["kernel"].params[1].shape] == [math.ceil(n / nr), k, nr]
    here = tvm.target.Target(T.runnable_here(target))
    box = _versions(T.with_target(func, here))
    args = T.random_args(func)
    want = T.run(T.build(func, here), func, args)
    dev = tvm.cpu()
    w = tvm.runtime.tensor(args[1], dev)
    packed = tvm.runtime.empty([int(d) for d in box["kernel"].params[1].shape], "float32", dev)
    T.build(box["pack"], here)["main"](w, packed)
    out = tvm.runtime.empty(want.shape, "float32", dev)
    tensors = [tvm.runtime.tensor(a, dev) for a in args]
    T.build(box["kernel"], here)["main"](tensors[0], packed, *tensors[2:], out)
    assert T.rel_error(out.numpy(), want) <= TOL


def test_off_or_without_prepacking_the_gemv_streams_its_weight():
    func = T.with_target(T.matmul_func(1, 64, 37), AVX512)
    assert not _versions(func, cpu_gemv_panels=False)
    assert not _versions(func, cpu_prepack=False)


def test_a_classifier_reads_its_weight_in_panels_and_equals_the_model():
    rng = np.random.default_rng(0)

    def body(bb, x):
        y = bb.emit(rop.mean(x, axis=[2, 3]))
        return rop.add(rop.matmul(y, const(rng, (24, 1000))), const(rng, (1000,)))

    mod = single_function((1, 24, 5, 5), body)
    x = rng.standard_normal((1, 24, 5, 5)).astype("float32")
    (want,) = reference(mod, {"x": x})
    pair = codl_tvm.DevicePair.preset("cpu-pair")
    exe = codl_tvm.compile(mod, pair, Plan.single(mod, "cpu"))
    (got,) = exe.run({"x": x})
    assert rel_err(got, want) <= TOL
    nr = gemv_panel(target_info(pair.cpu_target))
    shapes = [tuple(p["shape"]) for p in exe.manifest["params"]]
    assert (math.ceil(1000 / nr), 24, nr) in shapes and (24, 1000) not in shapes
