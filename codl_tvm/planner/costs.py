"""Cost sources: what the planner and ``explain`` ask for a sub-op's kernel time and a copy's.

Every source answers two questions, so the search never knows where times come from:

- ``kernel_us(role, sub)``: one processor running one sub-op (an :class:`OpSpec`);
- ``sharing_us(op, role, nbytes)``: ``to_cpu``/``to_gpu`` transfers (incl. their sync) and
  ``slice``/``concat``/``copy_gpu`` copies of ``nbytes`` (CoDL Eq. 2's sharing terms).

The rest of the protocol, with its defaults, is
:class:`~codl_tvm.planner.cost_source.CostSourceBase`; every source here subclasses it.

:class:`PredictorCosts` wraps a trained predictor (``codl``, ``flops``, ``eop``...);
:class:`MeasuredCosts` looks measured samples up (the oracle's source; shapes not measured,
such as chain members with a grown halo, are interpolated within their measured family), or
times single-op models on a pair when first asked (``explain --measure``);
:class:`AnalyticCosts` is a throughput-and-bandwidth model for tests and for explaining
(its :meth:`~AnalyticCosts.placeholder`: work proportional to FLOPs).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..geometry import OVERLAP_CPU_CHUNKS
from ..predictor.opspec import SHARING_KINDS, OpSpec
from ..predictor.split_sharing import SplitSharing, SplitUnit, price_split
from .cost_source import CostSource, CostSourceBase, as_source

__all__ = [
    "AnalyticCosts", "BlockCopyCosts", "CostSource", "CostSourceBase", "MeasuredCosts",
    "OverlappedCosts", "PairCosts", "PredictorCosts", "SerialCosts", "as_source",
]


class PredictorCosts(CostSourceBase):
    """Times from a trained predictor (:mod:`codl_tvm.predictor`)."""

    def __init__(self, predictor: Any, label: str | None = None) -> None:
        self.predictor = predictor
        self.label = label or f"{predictor.kind} predictor ({predictor.pair_})"

    def kernel_us(self, role: str, sub: OpSpec) -> float:
        return float(self.predictor.kernel_us(role, sub))

    def transposed_conv_us(self, role: str, sub: OpSpec) -> float:
        fn = getattr(self.predictor, "transposed_conv_us", None)  # a codl predictor's
        return self.kernel_us(role, sub) if fn is None else float(fn(role, sub))

    def sharing_us(self, op: str, role: str, nbytes: float) -> float:
        return float(self.predictor.sharing_.cost(op, role, nbytes))

    def in_model(self, footprint_bytes: int) -> PredictorCosts:
        """These costs for the ops of a model touching ``footprint_bytes`` per inference
        (the predictor's cache-residency context, where it models one)."""
        fn = getattr(self.predictor, "in_model", None)  # predictors without a cache context
        pred = fn(footprint_bytes) if fn is not None else self.predictor
        return self if pred is self.predictor else PredictorCosts(pred, self.label)

    def in_range(self, sub: OpSpec) -> bool:
        """``sub`` lies inside the shapes the predictor was trained on, on both processors."""
        try:
            return not any(self.predictor.out_of_range(r, sub) for r in ("cpu", "gpu"))
        except ValueError:  # a processor without samples
            return False


class PairCosts(CostSourceBase):
    """``costs`` as a kind of pair runs a split: the same times, with the pair's flags
    (``concurrent``, ``overlap``, ``block_copies``) that the planner's
    :class:`~codl_tvm.planner.search.UnitCost` and ``explain``'s timeline read, and whether
    the roles share one memory (``shared_memory``), which the plan's memory cap reads."""

    note = ""

    def __init__(self, costs: Any, cpu_chunks: int | None = None,
                 shared_memory: bool = True) -> None:
        self.costs = as_source(costs)
        self.shared_memory = bool(shared_memory)
        notes = [self.note] + ([] if self.shared_memory else ["the GPU's own memory"])
        self.label = ", ".join([self.costs.label, *filter(None, notes)])
        if cpu_chunks is not None:  # as `compile(..., cpu_chunks=...)` builds the splits
            self.cpu_chunks = cpu_chunks

    @property
    def unit(self) -> str:
        return self.costs.unit

    @property
    def slow(self) -> bool:
        return self.costs.slow

    def kernel_us(self, role: str, sub: OpSpec) -> float:
        return self.costs.kernel_us(role, sub)

    def transposed_conv_us(self, role: str, sub: OpSpec) -> float:
        return self.costs.transposed_conv_us(role, sub)

    def sharing_us(self, op: str, role: str, nbytes: float) -> float:
        return self.costs.sharing_us(op, role, nbytes)

    def in_model(self, footprint_bytes: int) -> PairCosts:
        return type(self)(self.costs.in_model(footprint_bytes), self.cpu_chunks,
                          self.shared_memory)

    def in_range(self, sub: OpSpec) -> bool:
        return self.costs.in_range(sub)


class SerialCosts(PairCosts):
    """``costs`` of a pair whose two roles compute on the same cores (the ``cpu-pair``): a
    split's parts then run one after the other, so a unit costs the sum of its parts, not the
    slower one, and co-execution gains nothing."""

    concurrent = False
    note = "roles on shared cores"


class OverlappedCosts(PairCosts):
    """``costs`` of a pair whose runtime overlaps a split's copies with its kernels (a CUDA
    GPU: :class:`~codl_tvm.passes.OverlapCopies`): a split's copies to and from the CPU
    delay the CPU's part, not the GPU's (:class:`~codl_tvm.planner.search.UnitCost`)."""

    overlap = True
    cpu_chunks = OVERLAP_CPU_CHUNKS
    note = "copies beside kernels"


class BlockCopyCosts(OverlappedCosts):
    """``costs`` of a pair that also moves a split's row slices and joins with 2-D copies on
    the GPU's copy engines (:class:`~codl_tvm.passes.LowerSlicesToBlockCopies`): no slice
    kernel before both parts, no concat, and the GPU's kernels read and write their rows of
    the whole tensors (nothing moves on the GPU's side)."""

    block_copies = True
    note = "copies beside kernels, the CPU's rows moved by the copy engines"


PLACEHOLDER_LABEL = ("PLACEHOLDER proportional to FLOPs (1 unit = 1 MFLOP or 1 MB moved), "
                     "not measured")


@dataclass
class AnalyticCosts(CostSourceBase):
    """Roofline-free analytic times: FLOPs over a throughput plus a launch cost per kernel;
    copies at a bandwidth plus a sync per transfer. For tests and back-of-envelope plans.

    ``unit``: ``"us"``, or ``"units"`` where the numbers are placeholders, not times
    (:meth:`placeholder`).
    """

    cpu_gflops: float = 50.0
    gpu_gflops: float = 200.0
    cpu_launch_us: float = 2.0
    gpu_launch_us: float = 5.0
    sync_us: float = 20.0
    copy_gbps: float = 10.0
    label: str = "analytic"
    unit: str = "us"

    @classmethod
    def placeholder(cls) -> AnalyticCosts:
        """Placeholders, not times (``explain`` without a predictor): work proportional to
        FLOPs at the same rate on both processors, no launch or sync; one unit is one MFLOP
        of computation, or one MB moved between or copied on processors."""
        return cls(cpu_gflops=1e3, gpu_gflops=1e3, cpu_launch_us=0.0, gpu_launch_us=0.0,
                   sync_us=0.0, copy_gbps=1e3, label=PLACEHOLDER_LABEL, unit="units")

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


class MeasuredCosts(CostSourceBase):
    """Kernel and sharing times measured on the target, from samples or timed on a pair.

    From ``rows`` (the oracle's source): kernels are looked up, and shapes not measured
    (chain members with a grown halo) interpolated within their measured family; sharing ops
    are priced by a :class:`~codl_tvm.predictor.sharing.SharingModel` fitted to the sharing
    rows.

    On a ``pair`` (``explain --measure``): a kernel not in ``rows`` is compiled alone with
    :func:`codl_tvm.compile` and timed (median of ``repeat``) when first asked, then kept. A
    split's sharing is what its split model takes beyond its slower part (before and after
    the parts in proportion to the bytes each side moves), and a whole op's move what it
    takes on the CPU with its input and output on the GPU beyond its kernel: both measured
    in place, so they hold whatever the pair overlaps.

    Parameters
    ----------
    rows : list of dict
        Rows of :func:`codl_tvm.profiler.read_samples` for one device pair.
    label : str
        Shown in reports.
    pair : DevicePair, optional
        Time what ``rows`` lack on this pair, and splits and moves in place.
    repeat : int
        Timings per model on ``pair``.
    """

    def __init__(self, rows: Sequence[dict[str, Any]] = (), label: str | None = None, *,
                 pair: Any = None, repeat: int = 10) -> None:
        from ..predictor.base import sub_spec
        from ..predictor.sharing import SharingModel

        self.pair, self.repeat = pair, repeat
        self.label = label or ("measured" if pair is None else
                               f"measured on {pair.name} (single-op models compiled with "
                               f"codl_tvm.compile, median of {repeat})")
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
        self._timed: dict[tuple, float] = {}

    @property
    def slow(self) -> bool:
        return self.pair is not None

    def kernel_us(self, role: str, sub: OpSpec) -> float:
        hit = self.exact.get((role, sub))
        if hit is not None:
            return hit
        if self.pair is not None:
            self.exact[(role, sub)] = self._time(sub, ("single", role))
            return self.exact[(role, sub)]
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

    def move_us(self, spec: OpSpec, direction: str) -> float:
        if self.pair is None:
            return super().move_us(spec, direction)
        both = max(self._time(spec, ("cpu-op", "gpu-io")) - self.kernel_us("cpu", spec), 0.0)
        moved = spec.in_bytes if direction == "to_cpu" else spec.out_bytes
        return both * moved / (spec.in_bytes + spec.out_bytes)

    def split_sharing(self, unit: SplitUnit) -> SplitSharing:
        """On a pair: the first op's split measured in place before the parts (both
        processors wait: ``lead_us``), the last op's after them (``join_us``)."""
        if self.pair is None:
            return super().split_sharing(unit)
        pre = self._split_share(unit.first, unit.dim, unit.ratio)[0]
        post = self._split_share(unit.last, unit.dim, unit.ratio)[1]
        return SplitSharing(lead_us=pre * unit.repeat, join_us=post * unit.repeat)

    def _split_share(self, spec: OpSpec, dim: str, ratio: float) -> tuple[float, float]:
        parts = spec.parts(dim, ratio)
        if parts["cpu"] is None:
            return 0.0, 0.0
        slowest = max(self.kernel_us(r, p) for r, p in parts.items() if p is not None)
        total = max(self._time(spec, ("split", dim, ratio)) - slowest, 0.0)
        moved = price_split(lambda op, role, n: float(n), SplitUnit.of(spec, dim, ratio))
        pre_b, post_b = moved.pre_us, moved.post_us
        return total * pre_b / (pre_b + post_b), total * post_b / (pre_b + post_b)

    def _time(self, spec: OpSpec, how: tuple) -> float:
        if (spec, how) not in self._timed:
            from ..single_op import time_single_op

            self._timed[(spec, how)] = time_single_op(self.pair, spec, how, self.repeat)
        return self._timed[(spec, how)]


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
