"""PrepackWeights: the CPU kernels read weights packed once at compile time.

- a compiled model's CPU kernels have no weight pass left, its lifted weights take the packed
  layouts, and it equals the model built with per-call packing and plain TVM (hypothesis, over
  the direct, 1x1 GEMM, Winograd and packed-matmul kernels, split or whole);
- a weight two kernels read is packed for each; ``cpu_prepack=False`` packs per call;
- the profiler's one-op functions take the packed weight as their parameter.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import const, conv, reference, rel_err, single_function
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import relax, tirx
from tvm.relax import op as rop

import codl_tvm
from codl_tvm import Plan, tiling
from codl_tvm.device import DevicePair
from codl_tvm.passes import PrepackWeights
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.profiler.kernels import build_role_module
from codl_tvm.profiler.space import Job
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules.analysis import leaf_blocks

PAIR = codl_tvm.DevicePair.preset("cpu-pair")
WEIGHT_PASSES = {"codl_wpack", "codl_wino_u"}
SETTINGS = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _compile(mod, plan: Plan, **variants):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # stated fallbacks (a ratio leaves a device nothing)
        return codl_tvm.compile(mod, PAIR, plan, variants=tiling.KernelVariants(**variants))


def _blocks(exe) -> dict[str, set[str]]:
    """Algorithm of each scheduled CPU kernel -> the names of its blocks."""
    out: dict[str, set[str]] = {}
    for func in exe.mod.functions.values():
        if isinstance(func, tirx.PrimFunc) and (b := blocking_of(func)) is not None:
            out.setdefault(b.algorithm, set()).update(blk.name_hint for blk in leaf_blocks(func))
    return out


def _model(h: int, w: int, ic: int, oc: int, seed: int):
    """A 3x3 conv (Winograd where wide enough, else direct), a 1x1 conv (GEMM), a stride-2
    3x3 conv (direct) and a dense layer over the rows (packed matmul), biases and ReLUs
    fused."""
    rng = np.random.default_rng(seed)

    def body(bb, x):
        y = conv(bb, x, rng, oc, 3, padding=(1, 1, 1, 1), bias=True)
        y = conv(bb, y, rng, oc, 1, bias=True)
        y = conv(bb, y, rng, ic, 3, stride=2, padding=(1, 1, 1, 1), bias=True)
        rows = bb.emit(rop.reshape(y, (int(y.ty.shape[1]), -1)))
        return rop.matmul(bb.emit(rop.permute_dims(rows)), const(rng, (ic, 32)))

    return single_function((1, ic, h, w), body)


def _check(mod, plan: Plan) -> dict:
    shape = [int(d) for d in mod["main"].params[0].ty.shape]
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    (ref,) = reference(mod, {"x": x})
    packed = _compile(mod, plan)
    per_call = _compile(mod, plan, cpu_prepack=False)
    for exe in (packed, per_call):
        (out,) = exe.run({"x": x})
        assert rel_err(out, ref) <= 1e-5
    return {"packed": packed, "per_call": per_call}


@pytest.mark.parametrize("ic,oc", [(64, 128), (8, 20)])
def test_kernels_read_weights_packed_at_compile_time(ic, oc):
    mod = _model(9, 11, ic, oc, seed=0)
    exes = _check(mod, Plan.single(mod, "cpu"))
    packed, per_call = _blocks(exes["packed"]), _blocks(exes["per_call"])
    wanted = {"gemm-1x1", "direct-nchwc", "gemm-packed"} | (
        {"winograd-2x2-3x3"} if ic >= 64 else set())
    assert wanted <= set(packed)
    for algorithm in wanted:
        assert not packed[algorithm] & WEIGHT_PASSES, algorithm
        assert per_call[algorithm] & WEIGHT_PASSES, algorithm
    shapes = [tuple(p["shape"]) for p in exes["packed"].manifest["params"]]
    if ic >= 64:  # Winograd's U in panels: [16, OC / ocb, IC, ocb]
        assert any(len(s) == 4 and s[0] == 16 and s[2] == ic for s in shapes)
    assert not any(s == (oc, ic, 3, 3) for s in shapes)  # no raw 3x3 weight is left


@SETTINGS
@given(h=st.integers(1, 12), w=st.integers(1, 9), wide=st.booleans(),
       oc=st.integers(1, 40), dim=st.sampled_from(["H", "OC"]), ratio=st.floats(0.05, 0.95))
def test_split_parts_read_packed_weights_and_equal_the_model(h, w, wide, oc, dim, ratio):
    ic = 64 if wide else 5
    mod = _model(h, w, ic, oc + (64 if wide else 0), seed=h * 31 + w)
    _check(mod, Plan.uniform(mod, dim, ratio))


@pytest.mark.parametrize("stride", [1, 2])
def test_a_transposed_conv_reads_its_flipped_weight_packed(stride):
    rng = np.random.default_rng(stride)

    def body(bb, x):
        return rop.nn.conv2d_transpose(x, const(rng, (12, 10, 3, 3)), strides=stride,
                                       padding=(1, 1, 1, 1), output_padding=stride - 1)

    mod = single_function((1, 12, 7, 9), body)
    exes = _check(mod, Plan.single(mod, "cpu"))
    (blocks,) = [b for a, b in _blocks(exes["packed"]).items() if a == "direct-nchwc"]
    assert not blocks & (WEIGHT_PASSES | {"codl_wflip"})
    assert _blocks(exes["per_call"])["direct-nchwc"] & WEIGHT_PASSES


def test_a_weight_two_kernels_read_is_packed_for_each():
    rng = np.random.default_rng(3)
    weight = const(rng, (24, 16, 3, 3))

    def body(bb, x):
        a = bb.emit(rop.nn.conv2d(x, weight, padding=(1, 1, 1, 1)))
        b = bb.emit(rop.nn.conv2d(x, weight, strides=2, padding=(1, 1, 1, 1)))
        return rop.add(rop.sum(a), rop.sum(b))

    mod = single_function((1, 16, 10, 10), body)
    exe = _check(mod, Plan.single(mod, "cpu"))["packed"]
    shapes = [tuple(p["shape"]) for p in exe.manifest["params"]]
    assert (24, 16, 3, 3) not in shapes and len(shapes) == 2


def test_the_profiler_times_kernels_that_read_packed_weights():
    sub = OpSpec("conv2d", 14, 14, 32, 48, 3, 3, pad=(1, 1, 1, 1))
    pair = DevicePair.preset("cpu-pair")
    mod, entries = build_role_module([Job("cpu", "conv2d", sub, "H", 0.0)], pair, "cpu")
    (entry,) = entries
    assert entry.inputs[0] == (1, 32, 14, 14) and len(entry.inputs[1]) == 5  # [OC/ocb, ...]
    assert not any(isinstance(f, tirx.PrimFunc) and WEIGHT_PASSES & {
        b.name_hint for b in leaf_blocks(f)} for f in mod.functions.values())
    with tiling.use_variants(tiling.KernelVariants(cpu_prepack=False)):
        _, (plain,) = build_role_module([Job("cpu", "conv2d", sub, "H", 0.0)], pair, "cpu")
    assert plain.inputs[1] == (48, 32, 3, 3)


def test_a_module_without_prepacking_kernels_is_left_as_it_is():
    mod = single_function((1, 4), lambda bb, x: rop.nn.relu(x))
    assert PrepackWeights()(mod).same_as(mod)
    assert isinstance(mod["main"], relax.Function)


def test_an_artifact_stores_the_weights_and_packs_them_where_it_loads(tmp_path):
    from codl_tvm import runtime

    mod = _model(6, 7, 64, 128, seed=5)
    exe = _compile(mod, Plan.single(mod, "cpu"))
    prepack = exe.manifest["prepack"]
    assert prepack["function"] == "codl_prepack" and prepack["outputs"]
    path = exe.export(tmp_path / "art")
    with np.load(path / runtime.PARAMS) as npz:
        stored = {k: npz[k].shape for k in npz.files}
    assert {s["name"] for s in prepack["sources"]} <= set(stored)
    assert not set(prepack["outputs"]) & set(stored)  # packed where it loads, not stored
    assert any(shape == (128, 64, 3, 3) for shape in stored.values())
    x = {"x": np.random.default_rng(2).standard_normal((1, 64, 6, 7)).astype("float32")}
    (want,) = exe.run(x)
    (got,) = runtime.load(path).run(x)
    np.testing.assert_array_equal(got, want)
    exe.export(tmp_path / "light", weights=False)  # random weights of the stored shapes
    assert runtime.load(tmp_path / "light").run(x)[0].shape == want.shape
