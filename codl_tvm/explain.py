"""Per-op explanation of a plan: where each op runs and what each device computes."""

from __future__ import annotations

import tvm

from .graph import entry_function, find_anchors
from .passes.co_execution_partition import _resolve, build_units
from .passes.split_rules import Unsplittable
from .passes.unit_geometry import h_parts, oc_parts
from .plan import Plan


def plan_rows(mod: tvm.IRModule, plan: Plan) -> list[dict]:
    """One row per partitionable op: id, kind, shapes, placement, and each device's share."""
    anchors = find_anchors(entry_function(mod))
    rows: dict[str, dict] = {}
    for unit in (_resolve(u) for u in build_units(anchors, plan)):
        chain = unit.name if len(unit.ops) > 1 else ""
        shares = _shares(unit)
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


def _shares(unit) -> list[tuple[str, str]] | None:
    if unit.place != "split":
        return None
    try:
        if unit.dim == "H":
            parts = h_parts(unit.ops, unit.ratio)
            return [(f"rows {g.out[0]}-{g.out[1] - 1}", f"rows {c.out[0]}-{c.out[1] - 1}")
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
        return f"{value:.3g}"
    return str(value)
