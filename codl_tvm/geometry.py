"""Row and channel geometry of split operators (CoDL Eq. 1 and Fig. 12).

All ranges are half-open ``[start, end)`` in the coordinates of the *unsplit* tensor. A window
op (conv2d, pooling) maps output rows ``[a, b)`` to the input rows it reads; the part of that
range outside ``[0, H)`` is the op's own zero (or -inf) padding, which stays padding: a sub-op
pads only where the unsplit op pads, at the true borders.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """One spatial axis of a window op: kernel, stride, dilation and the two paddings."""

    kernel: int
    stride: int = 1
    dilation: int = 1
    pad_before: int = 0
    pad_after: int = 0

    @property
    def extent(self) -> int:
        """Rows one output row reads: ``dilation * (kernel - 1) + 1``."""
        return self.dilation * (self.kernel - 1) + 1

    def out_size(self, in_size: int, ceil_mode: bool = False) -> int:
        span = in_size + self.pad_before + self.pad_after - self.extent
        steps = -(-span // self.stride) if ceil_mode else span // self.stride
        return steps + 1

    def in_rows(self, out_start: int, out_end: int) -> tuple[int, int]:
        """Unclamped input rows read by output rows ``[out_start, out_end)``.

        Row ``-1`` is the last row of top padding; rows ``>= H`` are bottom padding.
        """
        start = out_start * self.stride - self.pad_before
        end = (out_end - 1) * self.stride - self.pad_before + self.extent
        return start, end


@dataclass(frozen=True)
class TransposedWindow(Window):
    """One spatial axis of a conv2d_transpose (dilation 1): input row ``i`` scatters into
    output rows ``i * stride - pad_before + [0, kernel)``. As a stride-1 conv over the input
    dilated by ``stride`` and padded by ``kernel - 1 - pad_before`` (what it runs as), output
    row ``y`` reads the dilated rows ``y - (kernel - 1 - pad_before) + [0, kernel)``."""

    def in_rows(self, out_start: int, out_end: int) -> tuple[int, int]:
        """Unclamped input rows whose dilated positions output rows ``[out_start, out_end)``
        read."""
        lead = self.kernel - 1 - self.pad_before
        start = -(-(out_start - lead) // self.stride)  # ceil
        end = (out_end - 1 - lead + self.kernel - 1) // self.stride + 1
        return start, end


@dataclass(frozen=True)
class RowPart:
    """Rows one device computes of one op in an H split.

    ``out`` are the op's output rows; ``src`` the rows of its input tensor it is given (clamped
    to the tensor); ``pad`` the zero rows added before and after ``src`` (true borders only).
    """

    out: tuple[int, int]
    src: tuple[int, int]
    pad: tuple[int, int]

    @property
    def rows(self) -> int:
        return self.out[1] - self.out[0]


def row_part(window: Window, in_size: int, out_start: int, out_end: int) -> RowPart:
    """The input slice and paddings that compute output rows ``[out_start, out_end)``."""
    start, end = window.in_rows(out_start, out_end)
    lo, hi = max(0, start), min(in_size, end)
    return RowPart((out_start, out_end), (lo, hi), (lo - start, end - hi))


def halo_rows(window: Window, out_rows: int) -> int:
    """CoDL Eq. 1: extra input rows a part of ``out_rows`` output rows reads beyond its share.

    ``P = S * (H_O - 1) - H_I + F`` with ``H_I = S * H_O`` the rows the part would own in a
    stride-``S`` op (``F`` the dilated kernel extent).
    """
    return window.stride * (out_rows - 1) - window.stride * out_rows + window.extent


def split_count(total: int, ratio: float) -> int:
    """Units (rows, channels, channel groups) the GPU gets for GPU share ``ratio``.

    Rounded half up, so ratio 0.5 of 3 rows gives the GPU 2 rows.
    """
    if not 0.0 <= ratio <= 1.0 or math.isnan(ratio):
        raise ValueError(f"ratio {ratio} is outside [0, 1]")
    return min(total, max(0, math.floor(ratio * total + 0.5)))


def chain_row_parts(
    ops: list[tuple[Window, int]], out_rows: int, ratio: float
) -> dict[str, list[RowPart]] | None:
    """Per role (GPU first: rows ``[0, n_gpu)``), the row part of every op of an H-split unit.

    ``ops`` are the unit's ops in order, each as (its H window, its input rows); ``out_rows``
    the last op's output rows. Parts grow backwards through the chain by each op's window
    (CoDL Eq. 1). None where a role gets no rows, or a part would read padding only.
    """
    n_gpu = split_count(out_rows, ratio)
    if n_gpu in (0, out_rows):
        return None
    parts: dict[str, list[RowPart]] = {}
    for role, out in (("gpu", (0, n_gpu)), ("cpu", (n_gpu, out_rows))):
        chain = rows_back(ops, out)
        if chain is None:
            return None
        parts[role] = chain
    return parts


def rows_back(ops: list[tuple[Window, int]], out: tuple[int, int]) -> list[RowPart] | None:
    """The row part of every op of a chain that computes the last op's output rows ``out``
    (grown backwards through each op's window); None where a part would read padding only."""
    chain: list[RowPart] = []
    for window, in_rows in reversed(ops):
        part = row_part(window, in_rows, *out)
        if part.src[1] <= part.src[0]:
            return None
        chain.append(part)
        out = part.src
    return chain[::-1]


# most chunks of a row split's CPU part where its copies overlap kernels (a CUDA pair):
# each chunk's rows go to the GPU while the next computes; the device default and the
# planner's price both read it
OVERLAP_CPU_CHUNKS = 2

# fewest output rows one CPU chunk computes: a chunk is a kernel launch per op (the thread
# pool wakes every core for it) and re-reads its halo rows
MIN_CHUNK_ROWS = 4
# fewest bytes one chunk uploads: a chunk pays where the upload that the next chunk hides
# outlasts the kernel launches it adds (1 MiB moves in about 30 us at a PCIe 5 pinned floor;
# benchmarks/COEXEC.md)
MIN_CHUNK_BYTES = 1 << 20


def check_cpu_chunks(value: int | None, name: str = "cpu_chunks") -> int | None:
    """``value`` (a most-chunks count; None: the pair's default) if it is at least 1.

    Raises
    ------
    ValueError
        One line naming ``name`` (the option as the caller's user spells it).
    """
    if value is not None and value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def row_chunks(first: int, end: int, max_chunks: int, row_bytes: float = float("inf")
               ) -> list[tuple[int, int]]:
    """Output rows ``[first, end)`` cut into at most ``max_chunks`` near-equal runs, each of
    at least :data:`MIN_CHUNK_ROWS` rows and :data:`MIN_CHUNK_BYTES` of output
    (``row_bytes`` per row); one run where there are too few.

    The CPU's part of a row split runs chunk by chunk so that each chunk's rows go to the
    GPU while the next one computes (:class:`~codl_tvm.passes.CoExecutionPartition`); the
    planner prices the same cut (:func:`~codl_tvm.predictor.split_sharing.chunked_cpu`).
    """
    rows = end - first
    by_bytes = int(rows * row_bytes // MIN_CHUNK_BYTES) if row_bytes != float("inf") else rows
    count = max(1, min(max_chunks, rows // MIN_CHUNK_ROWS, by_bytes))
    bounds = [first + (rows * i) // count for i in range(count + 1)]
    return list(zip(bounds[:-1], bounds[1:]))
