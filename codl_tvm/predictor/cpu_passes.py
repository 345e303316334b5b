"""Bytes and floats of the CPU kernels' passes that ``cpu_terms`` prices per core: the weight
panels a conv worker fetches, and what a call moves past the cores' caches (helpers split off
``cpu_terms``)."""

from __future__ import annotations

from codl_tvm.predictor.opspec import OpSpec


def conv_panel_floats(panel_floats: int, k1: bool, l1_bytes: int) -> float:
    """Floats of one weight panel that a worker's first sweep fetches from the cores that
    packed it (``cpu_conv``'s panel term). A 1x1 model counts at most an L1's worth: beyond
    that the panel is loaded from L2 on every register tile anyway (the L1-spill term).
    With the cap, the 1x1 stride-2 rows of a shape left out of the fit score 75%
    within +-10% (65% without the term, 72% uncapped); the stride-1 1x1 model fits it to 0.
    A KxK model's panels count whole (capped, the held-out CNNs lost 1-2 points)."""
    return min(panel_floats, l1_bytes // 4) if k1 else panel_floats


def conv_refetch_floats(fetch_floats: float, rows: int, pairs: int,
                        l2_bytes: int) -> float:
    """Input floats one core fetches again because its rows outgrow its L2 (``cpu_conv``).

    A core's tasks sweep its input rows (``fetch_floats`` over ``rows`` output rows) once per
    channel block, ``pairs`` (block, row) pairs in all. Where the rows fit its L2 the later
    sweeps hit; beyond it, each later sweep fetches again the part the L2 could not keep (a
    hinge, as the L2's adaptive replacement keeps about its size of a cyclic sweep).
    A probe of 1x1 stride-2 convs (57x57, 256-2560 -> 256-992 channels, never
    trained on) ran 0.72-0.92x the model without it where the rows exceed 2 MB and several
    blocks share a core, and 46% within +-10% against 83% with it. ``l2_bytes``: one core's
    L2 (``Machine.cpu_l2_bytes_per_core``)."""
    if pairs <= rows:
        return 0.0
    return (pairs - rows) / rows * max(0.0, fetch_floats - l2_bytes / 4)


def direct_written_bytes(s: OpSpec, padded_plane: int, packed_out: int) -> int:
    """Bytes a direct-conv call writes: the padded (or sampled) copy of ``padded_plane``
    floats per input channel, the packed result (``packed_out`` floats) and the output."""
    return (s.IC * padded_plane + packed_out + s.out_elems) * 4


def gemm_pass_bytes(s: OpSpec, packed_pixels: int) -> int:
    """Bytes a 1x1 GEMM call moves besides its weight: the input, the packed input
    (``packed_pixels`` per channel, whole tiles), the packed result and the output (0
    ``packed_pixels``: in place, neither packed tensor)."""
    packed_result = s.out_elems if packed_pixels else 0
    return (s.IC * s.H * s.W + s.IC * packed_pixels + packed_result + s.out_elems) * 4


def winograd_streamed_bytes(u_bytes: int, l2s_bytes: int) -> float:
    """Bytes the Winograd weight transform streams past the L2s: U's part beyond them, and
    the 3x3 weights it is made from (9 floats for 16 of U)."""
    return max(0, u_bytes - l2s_bytes) * (1 + 9 / 16)
