"""Regimes of the CPU conv terms that the body-layer strata exposed."""

from __future__ import annotations

import pytest

from codl_tvm.predictor import cpu_terms
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.opspec import OpSpec

M = reference()
FETCH_K1, FETCH_KN = 1, 6  # cpu_conv's input-fetch slot of the 1x1 and of the KxK model


def conv(h: int, ic: int, oc: int, k: int = 1, s: int = 1) -> OpSpec:
    return OpSpec("conv2d", h, h, ic, oc, k, k, s, s, (k // 2,) * 4)


@pytest.mark.parametrize(("k", "s", "read"), [(1, 2, 10), (1, 1, 10), (3, 2, 21), (2, 2, 20)])
def test_a_window_shorter_than_its_stride_skips_rows(k: int, s: int, read: int) -> None:
    """Regression: the fetch of a 1x1 stride-2 conv counted the rows between its
    reads, which no load touches; the body stratum's 1x1 stride-2 rows ran at a median 0.64x
    that model (1 of 72 within +-10%)."""
    assert cpu_terms._rows_read(conv(64, 32, 32, k, s), 10) == read


def test_the_stride_two_1x1_fetch_is_about_a_quarter_of_the_3x3_one() -> None:
    """The same 45x45 output tasks: a core's 1x1 tasks read one row of the sampled copy per
    output row, OW wide (``cpu_conv.sampled_input``); the 3x3 ones every input row
    of their span and one more, 2*OW + 1 wide. (Before the copy sampled, the 1x1 read every
    other input row of its span, 2*OW - 1 wide: about half.)"""
    one = cpu_terms.cpu_conv(conv(90, 96, 96, 1, 2), M)[FETCH_K1]
    three = cpu_terms.cpu_conv(conv(90, 96, 96, 3, 2), M)[FETCH_KN]
    assert 0.2 < one / three < 0.25


def test_the_sampled_copy_is_the_1x1_stride_two_convs_pad_pass() -> None:
    """The direct conv's pad pass of a 1x1 window at stride 2 writes OH x OW' (OW' whole
    column tiles), a quarter of the padded copy a 3x3 window at stride 2 makes."""
    assert cpu_terms.direct_padded_in(conv(90, 96, 96, 1, 2), M) == (45, 56)
    assert cpu_terms.direct_padded_in(conv(90, 96, 96, 3, 2), M) == (91, 113)
