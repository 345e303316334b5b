"""The dispatch table's rows: (rule name, processor family, op kinds), in the order they are
tried (imports no TVM).

The one copy of the table. ``schedules/dispatch.py`` attaches each row's predicate and
schedule (``RULES``); the latency predictor's dispatch mirror (``predictor/mirror.py``) attaches
its shape-only mirror of each row, by name, and refuses to import while a row has neither a
mirror nor a stated reason to have none, so the two cannot drift apart. The op kinds are the
schedules' (``schedules.analysis.OpInfo.kind``).
"""

from __future__ import annotations

from typing import NamedTuple


class TableRow(NamedTuple):
    name: str
    family: str  # "cpu" | "gpu"
    ops: tuple[str, ...]


CONV = ("conv2d",)
GROUPED = ("depthwise_conv2d", "group_conv2d")

TABLE: tuple[TableRow, ...] = (
    TableRow("cpu-conv2d-gemm-1x1", "cpu", CONV),
    TableRow("cpu-conv2d-winograd", "cpu", CONV),
    TableRow("cpu-conv2d-direct-nchwc", "cpu", CONV),
    TableRow("cpu-conv2d-transpose", "cpu", ("conv2d_transpose",)),
    TableRow("cpu-grouped-conv2d", "cpu", GROUPED),
    TableRow("cpu-pool2d", "cpu", ("pool2d",)),
    TableRow("cpu-matmul", "cpu", ("matmul",)),
    TableRow("cpu-elementwise", "cpu", ("elementwise",)),
    TableRow("gpu-conv2d-thin-oc", "gpu", CONV),
    TableRow("gpu-conv2d-winograd", "gpu", CONV),
    TableRow("gpu-conv2d-tiled", "gpu", CONV),
    TableRow("gpu-conv2d-transpose-tiled", "gpu", ("conv2d_transpose",)),
    TableRow("gpu-conv2d-implicit-gemm", "gpu", CONV),
    TableRow("gpu-grouped-conv2d", "gpu", GROUPED),
    TableRow("gpu-global-pool2d", "gpu", ("pool2d",)),
    TableRow("gpu-pool2d", "gpu", ("pool2d",)),
    TableRow("gpu-gemv", "gpu", ("matmul",)),
    TableRow("gpu-matmul-tiled", "gpu", ("matmul",)),
    TableRow("gpu-matmul", "gpu", ("matmul",)),
    TableRow("gpu-elementwise", "gpu", ("elementwise",)),
)
