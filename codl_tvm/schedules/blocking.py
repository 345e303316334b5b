"""The blocking record of a scheduled kernel (CoDL Eq. 3 / Table 1).

CoDL predicts a kernel's latency as
``ceil(output / (block * cores)) * ceil(block / basic_unit) * t_basic_unit``.
Every schedule of this package states the terms it fixes, so the predictor learns only
``t_basic_unit``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import tvm

ATTR_KEY = "codl.blocking"


@dataclasses.dataclass(frozen=True)
class Blocking:
    """How a kernel divides its output among cores and within a core.

    Attributes
    ----------
    algorithm : str
        Kernel algorithm, e.g. ``"direct-nchwc"``, ``"implicit-gemm"``, ``"depthwise-direct"``,
        ``"pool"``, ``"gemv"``, ``"gemm"``, ``"dlight-fallback"``, ``"plain"``.
    processor : str
        ``"cpu"`` or ``"gpu"``.
    op : str
        Op kind recognised (``"conv2d"``, ``"depthwise_conv2d"``, ``"pool2d"``, ``"matmul"``,
        ``"elementwise"``, ``"unknown"``).
    output_size : int
        Output elements of the kernel (``Size_output`` of Eq. 3).
    block_shape : dict[str, int]
        Output elements one core (CPU parallel task) or one work-group (GPU thread block)
        computes, per output dimension; ``Size_block`` is their product.
    basic_unit_shape : dict[str, int]
        Output elements of one basic execution unit inside a core: the register tile of a
        SIMD micro-kernel on the CPU, the elements of one warp on the GPU.
    num_blocks : int
        Number of blocks launched (parallel tasks on the CPU, thread blocks on the GPU).
    cores : int | None
        Cores (CPU ``num-cores``) or ``None`` where the target does not state it (GPU SMs).
    vector_lanes : int
        SIMD lanes (CPU) or warp size (GPU).
    threads_per_block : int
        GPU threads per work-group; 1 on the CPU.
    grid : dict[str, int]
        Launch extents (``blockIdx.*``/``threadIdx.*``) on the GPU, parallel loop extents on
        the CPU.
    rule : str
        Name of the dispatch-table rule that produced the kernel.
    """

    algorithm: str
    processor: str
    op: str
    output_size: int
    block_shape: dict[str, int]
    basic_unit_shape: dict[str, int]
    num_blocks: int
    cores: int | None = None
    vector_lanes: int = 1
    threads_per_block: int = 1
    grid: dict[str, int] = dataclasses.field(default_factory=dict)
    rule: str = ""

    @property
    def block_size(self) -> int:
        """``Size_block`` of Eq. 3 (elements)."""
        return math.prod(self.block_shape.values()) if self.block_shape else 1

    @property
    def basic_unit_size(self) -> int:
        """``Size_basicUnit`` of Eq. 3 (elements)."""
        return math.prod(self.basic_unit_shape.values()) if self.basic_unit_shape else 1

    def eq3_steps(self, cores: int | None = None) -> int:
        """Number of sequential basic-unit steps of Eq. 3 (multiply by ``t_basicUnit``).

        Parameters
        ----------
        cores : int, optional
            Core count to use when the record has none (e.g. the SMs of a GPU).
        """
        n_cores = cores or self.cores or 1
        waves = math.ceil(self.output_size / (self.block_size * n_cores))
        return waves * math.ceil(self.block_size / self.basic_unit_size)

    def to_json(self) -> str:
        """Serialise to a JSON string (the PrimFunc attribute value)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Blocking:
        """Parse a JSON string written by :meth:`to_json`.

        Raises
        ------
        ValueError
            If the text is not a blocking record.
        """
        try:
            data: dict[str, Any] = json.loads(text)
            return cls(**data)
        except (json.JSONDecodeError, TypeError) as err:
            raise ValueError(f"not a codl.blocking record: {text[:80]!r} ({err})") from err


def attach(func: tvm.tirx.PrimFunc, blocking: Blocking) -> tvm.tirx.PrimFunc:
    """Return ``func`` with its blocking record as attribute ``codl.blocking``."""
    return func.with_attr(ATTR_KEY, blocking.to_json())


def blocking_of(func: tvm.tirx.PrimFunc) -> Blocking | None:
    """The blocking record of a scheduled PrimFunc, or ``None`` if it has none."""
    if func.attrs is None or ATTR_KEY not in func.attrs:
        return None
    return Blocking.from_json(str(func.attrs[ATTR_KEY]))
