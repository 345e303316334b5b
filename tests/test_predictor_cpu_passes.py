"""``cpu_passes``: the weight panels a direct-conv worker fetches and the bytes a call writes
past the L2s (terms of ``cpu_terms.cpu_conv``)."""

from __future__ import annotations

import math

import pytest

from codl_tvm import tiling
from codl_tvm.predictor import blocking, cpu_passes
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.mirror import conv_shape, kernel
from codl_tvm.predictor.opspec import OpSpec

M = reference()  # the H100 machine's CPU side: 16 cores, 16 lanes
L2_TOTAL = M.cores // M.cpu_smt * M.cpu_l2_bytes_per_core


def op(kind: str, h: int, w: int, ic: int, oc: int, k: int = 1, s: int = 1) -> OpSpec:
    return OpSpec(kind, h, w, ic, oc, k, k, s, s, (0, 0, 0, 0), 1, 1)


@pytest.mark.parametrize(("ic", "k", "counted"), [
    (64, 1, 32 * 64),  # a 1x1 panel within L1: whole
    (384, 1, 12288),  # exactly an L1 (48 KiB)
    (1812, 1, 12288),  # beyond: an L1's worth
    (1812, 3, 32 * 1812 * 9),  # a KxK panel: whole
])
def test_a_1x1_panel_counts_at_most_an_l1(ic: int, k: int, counted: int) -> None:
    """The panel a worker fetches from the cores that packed it, for 1x1 models
    up to an L1's worth (beyond, the L1-spill term loads it from L2 on every tile)."""
    assert cpu_passes.conv_panel_floats(32 * ic * k * k, k == 1, M.cpu_l1_bytes) == counted


def test_the_direct_conv_streams_the_bytes_it_writes_beyond_the_l2s() -> None:
    """The padded copy, the packed result and the output past the L2s (16 MiB
    on the H100 machine's 16 vCPUs), per core; the input, only read, is not counted."""
    small = op("conv2d", 56, 56, 64, 64, k=3)
    assert kernel("cpu", small, M).algorithm == "direct-nchwc"
    assert blocking.cpu_conv(small, M)[-1] == 0.0
    big = op("conv2d", 192, 192, 104, 704, k=1, s=2)  # 96x96 out, 7 tiles of 14 a row
    assert kernel("cpu", big, M).algorithm == "direct-nchwc"
    sampled = 104 * 96 * 98  # the 1x1 stride-2 pass writes only the samples, whole tiles
    packed, out = 704 * 96 * 98, 704 * 96 * 96
    written = cpu_passes.direct_written_bytes(big, 96 * 98, packed)
    assert written == (sampled + packed + out) * 4
    assert blocking.cpu_conv(big, M)[-1] == pytest.approx((written - L2_TOTAL) / M.cores)


@pytest.mark.parametrize(
    ("ic", "k", "spills"),
    [(16, 3, False), (32, 3, False), (64, 3, True), (512, 3, True), (256, 2, True)],
)
def test_direct_weight_panel_beyond_l1(ic: int, k: int, spills: bool) -> None:
    s = op("conv2d", 28, 28, ic, 40, k)  # OC 40: the direct kernel, not GEMM / Winograd
    assert kernel("cpu", s, M).algorithm == "direct-nchwc"
    ocb, _ = tiling.direct_tiles(conv_shape(s), M)
    panel_bytes = ocb * s.reduction * 4
    assert (panel_bytes > M.cpu_l1_bytes) == spills
    t = blocking.cpu_conv(s, M)
    waves = math.ceil(kernel("cpu", s, M).num_blocks / M.cores)
    assert t[5] == (waves * s.reduction * (ocb // M.lanes) if spills else 0.0)


L2 = M.cpu_l2_bytes_per_core


def test_a_core_fetches_again_the_rows_beyond_its_l2() -> None:
    """A core's tasks sweep its input rows once per channel block; the rows refit
    its L2 on later sweeps up to 2 MB, the rest comes again (a hinge)."""
    l2_floats = M.cpu_l2_bytes_per_core // 4
    assert cpu_passes.conv_refetch_floats(3 * l2_floats, 29, 29, L2) == 0.0  # one sweep
    assert cpu_passes.conv_refetch_floats(l2_floats / 2, 29, 87, L2) == 0.0  # fits: hits
    # three sweeps of rows twice the L2: two more fetches of the half that does not stay
    assert cpu_passes.conv_refetch_floats(2 * l2_floats, 29, 87, L2) == 2 * l2_floats


def test_the_1x1_stride2_fetch_counts_sweeps_past_the_l2() -> None:
    """Regression: 57x57 1812->992 at stride 2 (31 channel blocks, 29 rows of
    3 column tiles) has each core sweep all 29 input rows, 8.8 MB of sampled input, for
    each of the ~4 channel blocks its tasks span; the probe's rows ran 0.77-0.86x the model
    without the sweeps past the L2."""
    from codl_tvm.predictor.cpu_chunks import conv_core_row_pairs, conv_core_rows

    s = op("conv2d", 57, 57, 1812, 992, s=2)
    tasks = 31 * 29 * 3
    assert conv_core_rows(s, M, 3, tasks) == 29
    pairs = conv_core_row_pairs(M, 3, tasks)
    assert pairs == 114  # the busiest core's 338 tasks: about four sweeps of the 29 rows
    once = 29 * 1812 * 42  # rows x channels x the sampled row (3 tiles of 14)
    again = (pairs - 29) / 29 * (once - M.cpu_l2_bytes_per_core / 4)
    assert blocking.cpu_conv(s, M)[1] == pytest.approx(once + again)
