"""Cost sources: what the planner asks for a sub-op's kernel time and a copy's time.

Every source answers two questions, so the search never knows where times come from:

- ``kernel_us(role, sub)``: one processor running one sub-op (an :class:`OpSpec`);
- ``sharing_us(op, role, nbytes)``: ``to_cpu``/``to_gpu`` transfers (incl. their sync) and
  ``slice``/``concat`` copies of ``nbytes`` (CoDL Eq. 2's sharing terms).

:class:`PredictorCosts` wraps a trained predictor (``codl``, ``flops``, ``eop``...);
:class:`MeasuredCosts` looks measured samples up (the oracle's source; shapes not measured,
such as chain members with a grown halo, are interpolated within their measured family);
:class:`AnalyticCosts` is a throughput-and-bandwidth model for tests and for explaining.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..predictor.opspec import SHARING_KINDS, OpSpec


class CostSource(Protocol):
    """Where the planner's and ``explain``'s times come from: a kernel's time on a processor,
    and a sharing op's (``to_cpu``, ``to_gpu``, ``slice``, ``concat``, ``copy_gpu``) for its
    bytes. Optional:
    ``in_model(footprint_bytes)`` (cache residency), ``in_range(sub)``, ``concurrent``,
    ``unit`` (``"us"`` unless a source's numbers are not times)."""

    label: str

    def kernel_us(self, role: str, sub: OpSpec) -> float: ...

    def sharing_us(self, op: str, role: str, nbytes: float) -> float: ...


def move_us(costs: CostSource, spec: OpSpec, direction: str) -> float:
    """A whole op's input (``to_cpu``) or output (``to_gpu``) moved between the processors.

    A source that times the move in place (``explain``'s measured costs) answers through its
    own ``move_us``; the others price the bytes with ``sharing_us``.
    """
    own = getattr(costs, "move_us", None)
    if own is not None:
        return float(own(spec, direction))
    nbytes = spec.in_bytes if direction == "to_cpu" else spec.out_bytes
    return costs.sharing_us(direction, direction.removeprefix("to_"), nbytes)


def split_share_us(costs: CostSource, spec: OpSpec, dim: str, ratio: float
                   ) -> tuple[float, float]:
    """Sharing of ``spec`` split at ``ratio`` before its parts run (copy to the CPU, slices)
    and after (copy back, concat): the terms of
    :meth:`codl_tvm.predictor.sharing.SharingModel.op_cost`. A source that times a split in
    place answers through its own ``split_share``."""
    own = getattr(costs, "split_share", None)
    if own is not None:
        return own(spec, dim, ratio)
    return split_sharing(costs.sharing_us, spec, dim, ratio, block_copies(costs))


@dataclass(frozen=True)
class SplitSharing:
    """A split op's sharing by where it runs: the CPU's slice (a GPU kernel both parts wait
    for), the GPU's slice, the copies to and from the CPU, the GPU part's copy into the output
    (``gpu_join_us``, where block copies join the parts) and the concat after both."""

    lead_us: float = 0.0
    gpu_slice_us: float = 0.0
    to_cpu_us: float = 0.0
    to_gpu_us: float = 0.0
    join_us: float = 0.0
    gpu_join_us: float = 0.0

    @property
    def pre_us(self) -> float:
        return self.lead_us + self.gpu_slice_us + self.to_cpu_us

    @property
    def post_us(self) -> float:
        return self.to_gpu_us + self.join_us + self.gpu_join_us


def split_sharing_parts(cost: Any, spec: OpSpec, dim: str, ratio: float,
                        blocks: bool = False) -> SplitSharing:
    """The sharing of ``spec`` split at ``ratio`` from ``cost(op, role, nbytes)``.

    ``blocks``: the pair moves row slices and joins with 2-D copies
    (:class:`~codl_tvm.passes.LowerSlicesToBlockCopies`): the CPU's rows go to it straight
    from the input (no slice before both parts), the GPU's rows and its part's copy into the
    output are copies within the GPU (``copy_gpu``), and there is no concat.
    """
    cpu, gpu = spec.part("cpu", dim, ratio), spec.part("gpu", dim, ratio)
    if cpu is None:
        return SplitSharing()
    copies = {"to_cpu_us": cost("to_cpu", "cpu", cpu.in_bytes),
              "to_gpu_us": cost("to_gpu", "gpu", cpu.out_bytes)}
    if gpu is None:
        return SplitSharing(**copies)
    in_place = spec.joins_in_place(dim)
    if blocks:
        return SplitSharing(
            **copies, gpu_slice_us=cost("copy_gpu", "gpu", gpu.in_bytes) if dim == "H" else 0.0,
            gpu_join_us=0.0 if in_place else cost("copy_gpu", "gpu", gpu.out_bytes))
    slices = ({"lead_us": cost("slice", "gpu", cpu.in_bytes),
               "gpu_slice_us": cost("slice", "gpu", gpu.in_bytes)} if dim == "H" else {})
    join = 0.0 if in_place else cost("concat", "gpu", spec.out_bytes)
    return SplitSharing(**copies, **slices, join_us=join)


def split_sharing(cost: Any, spec: OpSpec, dim: str, ratio: float,
                  blocks: bool = False) -> tuple[float, float]:
    """(before, after) of a split from ``cost(op, role, nbytes)``."""
    parts = split_sharing_parts(cost, spec, dim, ratio, blocks)
    return parts.pre_us, parts.post_us


def in_model(costs: CostSource, footprint_bytes: int) -> CostSource:
    """``costs`` for one model's ops: sources with a cache-residency context (a predictor's
    L2 terms) see the model's per-inference footprint; the others are returned unchanged."""
    fn = getattr(costs, "in_model", None)
    return fn(footprint_bytes) if fn is not None else costs


def trusted(costs: CostSource, sub: OpSpec) -> bool:
    """Whether ``costs`` answers for ``sub`` from data rather than by extrapolation.

    Sources without a notion of range (measured, analytic) are always trusted.
    """
    check = getattr(costs, "in_range", None)
    return True if check is None else bool(check(sub))


class PredictorCosts:
    """Times from a trained predictor (:mod:`codl_tvm.predictor`)."""

    def __init__(self, predictor: Any, label: str | None = None) -> None:
        self.predictor = predictor
        self.label = label or f"{predictor.kind} predictor ({predictor.pair_})"

    def kernel_us(self, role: str, sub: OpSpec) -> float:
        return float(self.predictor.kernel_us(role, sub))

    def sharing_us(self, op: str, role: str, nbytes: float) -> float:
        return float(self.predictor.sharing_.cost(op, role, nbytes))

    def in_model(self, footprint_bytes: int) -> PredictorCosts:
        """These costs for the ops of a model touching ``footprint_bytes`` per inference
        (the predictor's cache-residency context, where it models one)."""
        fn = getattr(self.predictor, "in_model", None)
        pred = fn(footprint_bytes) if fn is not None else self.predictor
        return self if pred is self.predictor else PredictorCosts(pred, self.label)

    def in_range(self, sub: OpSpec) -> bool:
        """``sub`` lies inside the shapes the predictor was trained on, on both processors."""
        try:
            return not any(self.predictor.out_of_range(r, sub) for r in ("cpu", "gpu"))
        except ValueError:  # a processor without samples
            return False


class _PairCosts:
    """``costs`` as a kind of pair runs a split: the same times, with a class attribute the
    planner's :class:`~codl_tvm.planner.search.UnitCost` reads (``concurrent``, ``overlap``)."""

    note = ""

    def __init__(self, costs: CostSource) -> None:
        self.costs = costs
        self.label = f"{costs.label}, {self.note}"

    def kernel_us(self, role: str, sub: OpSpec) -> float:
        return self.costs.kernel_us(role, sub)

    def sharing_us(self, op: str, role: str, nbytes: float) -> float:
        return self.costs.sharing_us(op, role, nbytes)

    def in_model(self, footprint_bytes: int) -> _PairCosts:
        return type(self)(in_model(self.costs, footprint_bytes))

    def in_range(self, sub: OpSpec) -> bool:
        return trusted(self.costs, sub)


class SerialCosts(_PairCosts):
    """``costs`` of a pair whose two roles compute on the same cores (the ``cpu-pair``): a
    split's parts then run one after the other, so a unit costs the sum of its parts, not the
    slower one, and co-execution gains nothing."""

    concurrent = False
    note = "roles on shared cores"


class OverlappedCosts(_PairCosts):
    """``costs`` of a pair whose runtime overlaps a split's copies with its kernels (a CUDA
    GPU: :class:`~codl_tvm.passes.OverlapCopies`): a split's copies to and from the CPU
    delay the CPU's part, not the GPU's (:class:`~codl_tvm.planner.search.UnitCost`)."""

    overlap = True
    note = "copies beside kernels"


class BlockCopyCosts(OverlappedCosts):
    """``costs`` of a pair that also moves a split's row slices and joins with 2-D copies on
    the GPU's copy engines (:class:`~codl_tvm.passes.LowerSlicesToBlockCopies`): no slice
    kernel before both parts, the GPU's rows and its part's copy into the output on the GPU's
    side (``copy_gpu``), no concat."""

    block_copies = True
    note = "copies beside kernels, rows moved by the copy engines"


def block_copies(costs: CostSource) -> bool:
    """Whether the costs' pair slices and joins a split's rows with 2-D copies."""
    return getattr(costs, "block_copies", False)


def overlapped(costs: CostSource) -> bool:
    """Whether a split's copies run beside its kernels on the costs' pair."""
    return getattr(costs, "overlap", False)


def concurrent(costs: CostSource) -> bool:
    """Whether the two roles of the costs' pair compute at the same time."""
    return getattr(costs, "concurrent", True)


@dataclass
class AnalyticCosts:
    """Roofline-free analytic times: FLOPs over a throughput plus a launch cost per kernel;
    copies at a bandwidth plus a sync per transfer. For tests and back-of-envelope plans.
    """

    cpu_gflops: float = 50.0
    gpu_gflops: float = 200.0
    cpu_launch_us: float = 2.0
    gpu_launch_us: float = 5.0
    sync_us: float = 20.0
    copy_gbps: float = 10.0
    label: str = "analytic"

    def kernel_us(self, role: str, sub: OpSpec) -> float:
        rate, launch = ((self.gpu_gflops, self.gpu_launch_us) if role == "gpu"
                        else (self.cpu_gflops, self.cpu_launch_us))
        return launch + sub.flops / (rate * 1e3)

    def sharing_us(self, op: str, role: str, nbytes: float) -> float:
        sync = self.sync_us if op in ("to_cpu", "to_gpu") else 0.0
        return sync + nbytes / (self.copy_gbps * 1e3)  # copy_gpu too: a copy of the bytes


# ---- measured -------------------------------------------------------------------------------
def _family(role: str, s: OpSpec, axis: str) -> tuple:
    if axis == "H":  # everything but the rows and the row padding
        return (role, "H", s.kind, s.W, s.IC, s.OC, s.KH, s.KW, s.SH, s.SW, s.pad[1], s.pad[3],
                s.dilation, s.groups)
    reads_all = s.kind in ("conv2d", "dense") and s.groups == 1  # else channel-local
    return (role, "C", s.kind, s.H, s.W, s.KH, s.KW, s.SH, s.SW, s.pad, s.dilation,
            s.IC if reads_all else 0)


class MeasuredCosts:
    """Kernel and sharing times looked up in measured sample rows (profiler format).

    Parameters
    ----------
    rows : list of dict
        Rows of :func:`codl_tvm.profiler.read_samples` for one device pair.
    label : str
        Shown in reports.
    """

    def __init__(self, rows: Sequence[dict[str, Any]], label: str = "measured") -> None:
        from ..predictor.base import sub_spec
        from ..predictor.sharing import SharingModel

        self.label = label
        share = [r for r in rows if r["op"] in SHARING_KINDS]
        self.sharing = SharingModel().fit(share) if share else None
        self.exact: dict[tuple[str, OpSpec], float] = {}
        fams: dict[tuple, dict[int, float]] = defaultdict(dict)
        for r in rows:
            if r["op"] in SHARING_KINDS:
                continue
            sub = sub_spec(r)
            self.exact[(r["role"], sub)] = float(r["latency_us"])
            for axis in ("H", "C"):
                fams[_family(r["role"], sub, axis)][sub.out_elems] = float(r["latency_us"])
        self.families = {k: sorted(v.items()) for k, v in fams.items()}
        self.misses = 0

    def kernel_us(self, role: str, sub: OpSpec) -> float:
        hit = self.exact.get((role, sub))
        if hit is not None:
            return hit
        self.misses += 1
        for axis in ("H", "C"):
            pts = self.families.get(_family(role, sub, axis))
            if pts:
                return _interp(pts, sub.out_elems)
        raise KeyError(f"no measurement of {sub.kind} on {role} near {sub}; measure this model")

    def sharing_us(self, op: str, role: str, nbytes: float) -> float:
        if self.sharing is None:
            raise KeyError("the measurements have no sharing rows (to_cpu/to_gpu/slice/concat)")
        return float(self.sharing.cost(op, role, nbytes))


def _interp(pts: list[tuple[int, float]], x: int) -> float:
    """Piecewise-linear in output elements; proportional beyond the measured ends."""
    xs = [p[0] for p in pts]
    i = bisect.bisect_left(xs, x)
    if i < len(xs) and xs[i] == x:
        return pts[i][1]
    if i == 0:
        return pts[0][1] * x / xs[0] if len(pts) == 1 else max(
            pts[0][1] - (pts[1][1] - pts[0][1]) * (xs[0] - x) / (xs[1] - xs[0]), 1e-3)
    if i == len(xs):
        return pts[-1][1] * x / xs[-1]
    (x0, y0), (x1, y1) = pts[i - 1], pts[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
