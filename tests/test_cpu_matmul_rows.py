"""The CPU packed matmul's register tile on 16 vector registers
(``KernelVariants.cpu_matmul_rows``): 6 rows by a panel of 2 vectors, 12 accumulators, where
4 by 4 left no register for the loads; 32 registers keep 4 by 4. Both tiles equal the
unscheduled PrimFunc on awkward shapes (rows no tile divides, fewer rows than the tile, one
panel, K of 1, [1, M, K] activations, fused epilogues)."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.tiling import KernelVariants, use_variants
from tests.helpers import AVX2

TOL = 1e-5
AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}  # 16 lanes, 32


def _tile(func, target, rows: bool) -> dict:
    with use_variants(KernelVariants(cpu_matmul_rows=rows)):
        b = blocking_of(T.schedule(func, target))
    assert b.algorithm == "gemm-packed"
    return b.block_shape


def test_sixteen_registers_get_six_rows_of_two_vectors():
    func = T.matmul_func(128, 768, 3072, lead=1)  # BERT's FFN up-projection
    assert _tile(func, AVX2, rows=True) == {"m": 6, "n": 16}  # 12 accumulators
    assert _tile(func, AVX2, rows=False) == {"m": 4, "n": 32}  # 16: every register
    assert _tile(T.matmul_func(5, 8, 48), AVX2, rows=True) == {"m": 5, "n": 16}


def test_thirty_two_registers_keep_four_by_four():
    func = T.matmul_func(128, 768, 3072, lead=1)
    assert _tile(func, AVX512, rows=True) == _tile(func, AVX512, rows=False) == {"m": 4,
                                                                                 "n": 64}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(5, 40), k=st.integers(1, 70), panels=st.integers(1, 6),
       lead=st.integers(0, 1), fused=st.booleans(), rows=st.booleans())
def test_both_tiles_equal_the_reference(m, k, panels, lead, fused, rows):
    func = T.matmul_func(m, k, 16 * panels, bias_relu=fused, lead=lead)
    with use_variants(KernelVariants(cpu_matmul_rows=rows)):
        assert blocking_of(T.schedule(func, AVX2)).algorithm == "gemm-packed"
        assert T.check_cpu(func, AVX2) <= TOL
