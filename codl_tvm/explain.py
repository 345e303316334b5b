"""Per-op explanation of a plan: where each op runs, what each device computes, and how long.

:func:`plan_rows` needs only the model and the plan. :func:`explain` adds each op's CPU, GPU
and sharing time from a cost source (:mod:`codl_tvm.planner.costs`: a trained predictor,
measured samples or single-op models timed here, or FLOPs-proportional placeholders) and lays
out the timeline that :func:`codl_tvm.timeline.draw` draws.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import tvm

from .graph import entry_function, find_anchors
from .passes.units import _resolve as resolve_unit
from .passes.units import build_units
from .plan import Plan
from .planner.cost_source import as_source
from .planner.nodes import desc_spec
from .predictor.opspec import OpSpec
from .split_rules import Unsplittable
from .unit_geometry import cpu_row_chunks, h_parts, oc_parts

# plan_rows' columns, then the cost columns explain() adds
PLAN_COLUMNS = ["op", "kind", "in", "out", "place", "dim", "ratio", "chain", "gpu", "cpu"]
COST_COLUMNS = ["cpu_us", "gpu_us", "share_us", "total_us"]
TABLE_COLUMNS = ["op", "kind", "out", "place", "dim", "ratio", "chain", *COST_COLUMNS]


def plan_rows(mod: tvm.IRModule, plan: Plan, cpu_chunks: int = 1) -> list[dict]:
    """One row per partitionable op: id, kind, shapes, placement, and each device's share
    (``cpu_chunks``: the most chunks the pair runs a row split's CPU part in; the CPU's share
    says how many it gets where that is more than one)."""
    anchors = find_anchors(entry_function(mod))
    rows: dict[str, dict] = {}
    for unit in (resolve_unit(u) for u in build_units(anchors, plan)):
        chain = unit.name if len(unit.ops) > 1 else ""
        shares = _shares(unit, cpu_chunks)
        for i, op in enumerate(unit.ops):
            gpu, cpu = shares[i] if shares else (("all", "-") if unit.place == "gpu" else
                                                 ("-", "all"))
            rows[op.op_id] = {
                "op": op.op_id, "kind": op.kind,
                "in": "x".join(map(str, op.in_shape)), "out": "x".join(map(str, op.out_shape)),
                "place": unit.place, "dim": unit.dim or "", "ratio": unit.ratio,
                "chain": chain, "gpu": gpu, "cpu": cpu,
            }
    return [rows[a.op_id] for a in anchors]


def _shares(unit, cpu_chunks: int = 1) -> list[tuple[str, str]] | None:
    if unit.place != "split":
        return None
    try:
        if unit.dim == "H":
            parts = h_parts(unit.ops, unit.ratio)
            chunks = len(cpu_row_chunks(unit.ops, parts["cpu"], cpu_chunks))
            tail = f" in {chunks} chunks" if chunks > 1 else ""
            return [(f"rows {g.out[0]}-{g.out[1] - 1}", f"rows {c.out[0]}-{c.out[1] - 1}{tail}")
                    for g, c in zip(parts["gpu"], parts["cpu"])]
        parts = oc_parts(unit.ops, unit.ratio)
        return [(f"ch {g.out[0]}-{g.out[1] - 1}", f"ch {c.out[0]}-{c.out[1] - 1}")
                for g, c in zip(parts["gpu"], parts["cpu"])]
    except Unsplittable as err:
        return [(str(err), "")] * len(unit.ops)


def format_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A plain-text table (the CLI prints it; no extra dependency)."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join([line, sep, *body])


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


# ---- op descriptions -> predictor specs ------------------------------------------------------
def op_spec(desc: dict) -> tuple[OpSpec, int]:
    """The :class:`OpSpec` of one op of :func:`codl_tvm.list_ops`, and how often it repeats
    (:func:`~codl_tvm.planner.nodes.desc_spec`; a matmul of two activations is priced as one
    of a weight of its shape, a ConvTranspose without a conv form as elementwise work)."""
    spec, repeat = desc_spec(desc, weightless_matmul=True)
    if spec is None:  # a conv2d_transpose the conv kernels do not run
        out = desc["out"]
        return OpSpec("elementwise", out[2], out[3], out[1], out[1]), 1
    return spec, repeat


# ---- explanation -------------------------------------------------------------------------
@dataclass
class Explanation:
    """Everything ``codl-tvm explain`` shows: per-op rows, the timeline, and notes.

    Attributes
    ----------
    rows : list of dict
        :func:`plan_rows` columns plus ``cpu_us``, ``gpu_us``, ``share_us``, ``total_us``.
    timeline : codl_tvm.timeline.Timeline
        Boxes of the co-executed run and of the CPU-only and GPU-only runs.
    source : str
        Where the times come from (predictor, measurement or placeholder).
    notes : list of str
        Warnings met on the way (ops left unsplit, predictions outside the trained range).
    planned_us : float or None
        The planner's estimate of the whole plan on the same costs
        (:func:`codl_tvm.planner.api.estimate`): the timeline's ops plus the ops outside the
        plan between them (activations, adds, concats), which the timeline does not draw.
    """

    rows: list[dict]
    timeline: object
    source: str
    unit: str = "us"
    notes: list[str] = field(default_factory=list)
    planned_us: float | None = None  # the planner's estimate of the plan, glue ops included

    def table(self, columns: list[str] | None = None) -> str:
        return format_table(self.rows, columns or TABLE_COLUMNS)

    def summary(self) -> str:
        tl = self.timeline
        best_role = "GPU" if tl.gpu_only_us <= tl.cpu_only_us else "CPU"
        best = min(tl.gpu_only_us, tl.cpu_only_us)
        speedup = best / tl.coexec_us if tl.coexec_us > 0 else float("nan")
        u = self.unit
        overlap = (f"; parallel branches on both processors save {tl.overlap_us:.1f} {u}"
                   if tl.overlap_us > 0 else "")
        return (
            f"times: {self.source}\n"
            f"co-executed {tl.coexec_us:.1f} {u} (sharing {tl.share_us:.1f} {u}{overlap}); "
            f"CPU only {tl.cpu_only_us:.1f} {u}; GPU only {tl.gpu_only_us:.1f} {u}; "
            f"{speedup:.2f}x the best single processor ({best_role})"
        ) + (f"\nthe planner's estimate, with the ops between these (not drawn): "
             f"{self.planned_us:.1f} {u}" if self.planned_us is not None else "")


def explain(mod: tvm.IRModule, plan: Plan, costs) -> Explanation:
    """Per-op times of ``plan`` on ``mod`` from ``costs``, and the timeline they make.

    Parameters
    ----------
    mod : IRModule
        The model (from :func:`codl_tvm.load_model`).
    plan : Plan
        Validated against ``mod`` here.
    costs : CostSource
        Where the times come from (:mod:`codl_tvm.planner.costs`): a predictor's, measured
        samples or single-op models timed on a pair (``MeasuredCosts``), or FLOPs
        placeholders (``AnalyticCosts.placeholder()``).
    """
    from .planner.api import build_graph, estimate
    from .planner.branches import parallel_branches
    from .timeline import layout

    plan.validate(mod)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        docs = [a.describe() for a in find_anchors(entry_function(mod))]
        specs = {d["id"]: op_spec(d) for d in docs}
        mg = build_graph(mod)
        planned = estimate(mg, plan, costs)  # as the planner prices it, on the costs given
        costs = as_source(costs).in_model(footprint_bytes(docs))
        rows = plan_rows(mod, plan, costs.cpu_chunks if costs.overlap else 1)
        groups = [[[n.op_id for n in branch] for branch in group]
                  for group in parallel_branches(mg.nodes)]
        timeline = layout(rows, specs, costs, plan.io_device, branches=groups)
    # the planner's own notes first: why the plan is what it is
    notes = list(dict.fromkeys([*plan.notes, *(str(w.message) for w in caught)]))
    return Explanation(rows, timeline, costs.label, costs.unit, notes, planned)


def footprint_bytes(docs: list[dict]) -> int:
    """Bytes the anchors of a model touch per inference (weights and outputs, float32), as
    the planner counts them (:func:`codl_tvm.planner.nodes.footprint_bytes`)."""
    return 4 * sum(math.prod(d.get("weight", [0])) + math.prod(d["out"]) for d in docs)


# ---- single-op models: codl_tvm.single_op --------------------------------------------------


def model_op_specs(mod: tvm.IRModule, name: str = "model") -> list[tuple[str, OpSpec]]:
    """``(name, OpSpec)`` of each distinct partitionable op of ``mod``: what to profile so a
    predictor covers this model (``codl_tvm.profiler.space.compute_jobs`` takes them)."""
    from .graph import list_ops

    specs = dict.fromkeys(op_spec(d)[0] for d in list_ops(mod))
    return [(name, spec) for spec in specs]
