"""The CPU 1x1 GEMM's unpack pass over whole channels (``KernelVariants.cpu_gemm_flat_unpack``):
where the image's pixels leave a tail in the last register tile, the kernel packs its input
and unpacks its result in passes of their own; the unpack copies each output channel's pixels
as one vectorised run (rows of 7, 14 or 28 pixels fill no whole vector), epilogue included.
It equals the unscheduled PrimFunc on awkward shapes (one pixel, one-row images, tails of one
pixel, padding, stride 2, batch 2, a residual add in the epilogue), and the scheduled
function is one that TVM's ``Schedule`` accepts again."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings
from tvm import s_tir, tirx
from tvm.relax import op as rop

from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.analysis import leaf_blocks
from codl_tvm.tiling import KernelVariants, use_variants
from tests.helpers import AVX2

TOL = 1e-5
GEMM = "cpu-conv2d-gemm-1x1"
OFF = KernelVariants(cpu_gemm_flat_unpack=False)


def _loops(func: tirx.PrimFunc, prefix: str) -> list[tirx.For]:
    """The loops around the first computing block whose name starts with ``prefix``,
    outermost first (a cut loop's wrapper blocks, ``*_common`` and ``*_partition``, skipped)."""
    def walk(stmt, path):
        if isinstance(stmt, tirx.For):
            return walk(stmt.body, [*path, stmt])
        if isinstance(stmt, s_tir.SBlockRealize):
            name = stmt.block.name_hint
            if name.startswith(prefix) and not name.endswith(("_common", "_partition")):
                return path
            return walk(stmt.block.body, path)
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                if (found := walk(s, path)) is not None:
                    return found
        if isinstance(stmt, tirx.IfThenElse | tirx.AttrStmt | tirx.LetStmt):
            return walk(stmt.then_case if isinstance(stmt, tirx.IfThenElse) else stmt.body, path)
        return None

    return walk(func.body, []) or []


def _vectorised(loops: list[tirx.For]) -> bool:
    return bool(loops) and int(loops[-1].kind) == int(tirx.ForKind.VECTORIZED)


def _residual_func(c: int, oc: int, h: int, w: int) -> tirx.PrimFunc:
    """1x1 conv + bias + a residual of the output's shape (MobileNet-V2's projections)."""
    def body(bb, x, wt, b, r):
        return rop.add(bb.emit(rop.add(bb.emit(rop.nn.conv2d(x, wt)), b)), r)

    return T.op_func([("x", (1, c, h, w)), ("w", (oc, c, 1, 1)), ("b", (1, oc, 1, 1)),
                      ("r", (1, oc, h, w))], body, fuse=True)  # fmt: skip


def test_a_14x14_image_is_unpacked_in_vectors_a_task_per_channel():
    func = T.conv2d_func((1, 96, 14, 14), (144, 96, 1, 1), bias_relu=True)
    new = T.schedule(func, AVX2)
    assert blocking_of(new).rule == GEMM
    unpack = _loops(new, "codl_unpack")
    assert _vectorised(unpack) and int(unpack[-1].extent) == 8  # 196 pixels, 25 vectors of 8
    assert int(unpack[0].extent) == 144  # one task a channel
    with use_variants(OFF):  # row by row: 14 pixels fill no vector of 8, the pass is scalar
        old = T.schedule(func, AVX2)
        assert not _vectorised(_loops(old, "codl_unpack"))
        assert int(_loops(old, "codl_unpack")[0].extent) == 144 * 14
    assert leaf_blocks(new)  # TIR that a new Schedule accepts


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 2), ic=st.integers(1, 40), oc=st.integers(1, 40),
       h=st.integers(1, 16), w=st.integers(1, 16), pad=st.sampled_from([0, 1]),
       target=st.sampled_from([AVX2, T.CPU_TARGET]))
def test_the_packed_gemm_equals_the_reference(n, ic, oc, h, w, pad, target):
    func = T.conv2d_func((n, ic, h, w), (oc, ic, 1, 1), padding=(pad,) * 4, bias_relu=True)
    assert blocking_of(T.schedule(func, target)).rule == GEMM
    assert T.check_cpu(func, target) <= TOL


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from([(1, 1), (1, 13), (7, 7), (14, 14), (3, 11), (13, 13)]),
       oc=st.sampled_from([5, 24, 33]))
def test_a_residual_add_in_the_unpack_equals_the_reference(shape, oc):
    func = _residual_func(24, oc, *shape)
    assert blocking_of(T.schedule(func, AVX2)).rule == GEMM
    assert T.check_cpu(func, AVX2) <= TOL


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(2, 15), w=st.integers(2, 15))
def test_stride_2_through_the_gemm_equals_the_reference(h, w):
    func = T.conv2d_func((1, 16, h, w), (24, 16, 1, 1), strides=(2, 2), bias_relu=True)
    with use_variants(cpu_gemm="always"):  # the GEMM samples the strided pixels in its pack
        assert blocking_of(T.schedule(func, AVX2)).rule == GEMM
        assert T.check_cpu(func, AVX2) <= TOL
