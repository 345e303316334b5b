"""The cost-source protocol: what the planner's search and ``explain`` ask of a source.

Two methods are required (:class:`CostSource`): a sub-op's kernel time on a processor and a
sharing op's time for its bytes. The rest, with documented defaults, is
:class:`CostSourceBase`; sources subclass it, and :func:`as_source` gives a duck-typed source
the defaults. The sources themselves are in :mod:`codl_tvm.planner.costs`. No TVM import.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..predictor.opspec import OpSpec
from ..predictor.split_sharing import SplitSharing, SplitUnit, price_split


class CostSource(Protocol):
    """What a cost source must answer: a kernel's time on a processor, and a sharing op's
    (``to_cpu``, ``to_gpu``, ``slice``, ``concat``, ``copy_gpu``) for its bytes. The
    optional rest of the protocol, with its defaults, is :class:`CostSourceBase`."""

    label: str

    def kernel_us(self, role: str, sub: OpSpec) -> float: ...

    def sharing_us(self, op: str, role: str, nbytes: float) -> float: ...


# the optional flags of the protocol (:class:`CostSourceBase`), which wrappers pass through
FLAGS = ("unit", "slow", "concurrent", "overlap", "block_copies", "cpu_chunks", "shared_memory")


class CostSourceBase:
    """The whole cost-source protocol, with the defaults of its optional parts.

    Attributes
    ----------
    label : str
        Where the times come from, shown in reports.
    unit : str
        ``"us"`` unless the numbers are not times (FLOPs placeholders: ``"units"``).
    slow : bool
        Answers take long (compiles and timings): ``explain`` shows a progress bar.
    concurrent : bool
        The pair's two roles compute at the same time (False: on shared cores, a split's
        parts run one after the other).
    overlap : bool
        A split's copies to and from the CPU run beside its kernels (CUDA's
        :class:`~codl_tvm.passes.OverlapCopies`): they delay the CPU's part only.
    block_copies : bool
        A split's row slices and joins are 2-D copies within the GPU
        (:class:`~codl_tvm.passes.LowerSlicesToBlockCopies`).
    cpu_chunks : int
        Most chunks the CPU's part of a row split runs in, each uploaded while the next
        computes (:attr:`~codl_tvm.DevicePair.cpu_chunks`; with ``overlap`` only).
    shared_memory : bool
        The pair's two roles draw on one memory (:attr:`~codl_tvm.DevicePair.shares_memory`),
        so a plan's memory cap counts both roles' bytes; False: the GPU has memory of its
        own and the cap counts the GPU's (:func:`~codl_tvm.planner.strategies.cap_memory`).
    """

    label: str = "costs"
    unit: str = "us"
    slow: bool = False
    concurrent: bool = True
    overlap: bool = False
    block_copies: bool = False
    cpu_chunks: int = 1
    shared_memory: bool = True

    def kernel_us(self, role: str, sub: OpSpec) -> float:
        raise NotImplementedError

    def sharing_us(self, op: str, role: str, nbytes: float) -> float:
        raise NotImplementedError

    def in_model(self, footprint_bytes: int) -> CostSourceBase:
        """These costs for the ops of a model touching ``footprint_bytes`` per inference
        (a cache-residency context; default: the same costs)."""
        return self

    def transposed_conv_us(self, role: str, sub: OpSpec) -> float:
        """A conv2d_transpose on ``role``, ``sub`` being the stride-1 conv over its dilated
        input (:attr:`~codl_tvm.planner.nodes.OpNode.spec`); default: that conv's time, where
        a source cannot tell the kernels apart."""
        return self.kernel_us(role, sub)

    def in_range(self, sub: OpSpec) -> bool:
        """Whether ``sub`` is answered from data rather than by extrapolation (default: yes);
        the planner never splits an op outside the range."""
        return True

    def move_us(self, spec: OpSpec, direction: str) -> float:
        """A whole op's input (``to_cpu``) or output (``to_gpu``) moved between the
        processors (default: its bytes priced by :meth:`sharing_us`)."""
        nbytes = spec.in_bytes if direction == "to_cpu" else spec.out_bytes
        return self.sharing_us(direction, direction.removeprefix("to_"), nbytes)

    def split_sharing(self, unit: SplitUnit) -> SplitSharing:
        """The sharing of a split unit, for the planner's search and ``explain`` alike
        (default: :func:`~codl_tvm.planner.sharing_costs.price_split` from
        :meth:`sharing_us`, with this pair's :attr:`block_copies`)."""
        return price_split(self.sharing_us, unit, self.block_copies)


def as_source(costs: Any) -> CostSourceBase:
    """``costs`` with the whole protocol: itself where it subclasses :class:`CostSourceBase`;
    a duck-typed source (``label``, ``kernel_us``, ``sharing_us``, and any of ``in_model``,
    ``in_range`` and the flags) is adapted."""
    return costs if isinstance(costs, CostSourceBase) else _Adapted(costs)


class _Adapted(CostSourceBase):
    """A duck-typed source behind the protocol: what it defines of the optional parts is
    read here, once, and the defaults fill the rest (its own ``move_us`` and
    ``split_sharing`` are not used: a source that prices those subclasses the base)."""

    def __init__(self, costs: Any) -> None:
        self.costs = costs
        self.label = getattr(costs, "label", type(costs).__name__)
        for name in FLAGS:
            if hasattr(costs, name):
                setattr(self, name, getattr(costs, name))

    def kernel_us(self, role: str, sub: OpSpec) -> float:
        return self.costs.kernel_us(role, sub)

    def sharing_us(self, op: str, role: str, nbytes: float) -> float:
        return self.costs.sharing_us(op, role, nbytes)

    def in_model(self, footprint_bytes: int) -> CostSourceBase:
        fn = getattr(self.costs, "in_model", None)
        return self if fn is None else as_source(fn(footprint_bytes))

    def in_range(self, sub: OpSpec) -> bool:
        fn = getattr(self.costs, "in_range", None)
        return True if fn is None else bool(fn(sub))

    def transposed_conv_us(self, role: str, sub: OpSpec) -> float:
        fn = getattr(self.costs, "transposed_conv_us", None)
        return self.kernel_us(role, sub) if fn is None else fn(role, sub)
