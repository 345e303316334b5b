"""The CPU Winograd kernel's operands in panels (``KernelVariants.cpu_winograd_panels``):
what one GEMM task reads is contiguous, the transformed weight ``U`` as
``[16, OC/ocb, IC, ocb]`` (the old ``[OC/ocb, IC, 16, ocb]`` gave a task one cache line per
KiB) and the transformed input ``V`` as ``[N, 16, P/pt, IC, pt]``. Both layouts equal the
unscheduled PrimFunc on awkward shapes (one output row or column, OC that no SIMD block
divides, asymmetric padding), per-call and packed at compile time, whole and split."""

from __future__ import annotations

import warnings

import hypothesis.strategies as st
import numpy as np
from helpers import conv, reference, rel_err, single_function
from hypothesis import HealthCheck, given, settings

import codl_tvm
from codl_tvm import Plan
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.tiling import KernelVariants, use_variants

TOL = 1e-5
AVX2 = {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}
PAIR = codl_tvm.DevicePair.preset("cpu-pair")
SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(h=st.integers(1, 9), w=st.integers(1, 9), ic=st.sampled_from([128, 136]),
       oc=st.integers(64, 100), pads=st.tuples(*[st.integers(0, 1)] * 4),
       panels=st.booleans())
def test_both_layouts_equal_the_reference(h, w, ic, oc, pads, panels):
    h, w = h + 2 - pads[0] - pads[2], w + 2 - pads[1] - pads[3]  # h x w outputs
    func = T.conv2d_func((1, ic, h, w), (oc, ic, 3, 3), padding=pads)
    with use_variants(KernelVariants(cpu_winograd_panels=panels)):
        assert blocking_of(T.schedule(func, AVX2)).algorithm == "winograd-2x2-3x3"
        assert T.check_cpu(func, AVX2) <= TOL


def _model(h: int, w: int, oc: int):
    rng = np.random.default_rng(h * 7 + oc)
    return single_function((1, 128, h, w), lambda bb, x: conv(
        bb, x, rng, oc, 3, padding=(1, 1, 1, 1), bias=True))


def _packed_shapes(exe) -> list[tuple[int, ...]]:
    return [tuple(p["shape"]) for p in exe.manifest["params"] if len(p["shape"]) == 4]


def test_the_weight_is_packed_at_compile_time_in_the_variant_layout():
    mod = _model(5, 6, 72)
    x = {"x": np.random.default_rng(0).standard_normal((1, 128, 5, 6)).astype("float32")}
    (ref,) = reference(mod, x)
    shapes = {}
    for panels in (True, False):
        exe = codl_tvm.compile(mod, PAIR, Plan.single(mod, "cpu"),
                               variants=KernelVariants(cpu_winograd_panels=panels))
        assert rel_err(exe.run(x)[0], ref) <= TOL
        shapes[panels] = _packed_shapes(exe)
    # 72 channels in `blocks` SIMD blocks of `ocb` (the host's vector width sets ocb)
    (u,) = [s for s in shapes[True] if s[0] == 16 and s[2] == 128]
    _, blocks, _, ocb = u
    assert blocks == -(-72 // ocb)
    assert (blocks, 128, 16, ocb) in shapes[False], shapes


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(2, 9), oc=st.integers(64, 90), dim=st.sampled_from(["H", "OC"]),
       ratio=st.floats(0.1, 0.9))
def test_split_parts_in_panels_equal_the_model(h, oc, dim, ratio):
    mod = _model(h, 7, oc)
    x = {"x": np.random.default_rng(h).standard_normal((1, 128, h, 7)).astype("float32")}
    (ref,) = reference(mod, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a share that leaves a part no rows says so
        exe = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, dim, ratio))
    assert rel_err(exe.run(x)[0], ref) <= TOL
