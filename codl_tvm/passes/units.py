"""Units of placement: one op with its epilogue, or a chain of them sharing one split."""

from __future__ import annotations

import warnings

from ..graph import AnchorOp
from ..plan import Plan, PlanError
from ..split_rules import Unsplittable
from ..unit_geometry import ROLE_ORDER, h_parts, oc_parts, whole_role

__all__ = ["ROLE_ORDER", "Unit", "build_units", "resolve_unit"]


class Unit:
    """Ops that run under one placement: one op, or a chain."""

    def __init__(self, ops: list[AnchorOp], place: str, dim: str | None, ratio: float | None):
        self.ops, self.place, self.dim, self.ratio = ops, place, dim, ratio

    @property
    def name(self) -> str:
        return "+".join(op.op_id for op in self.ops)


def build_units(anchors: list[AnchorOp], plan: Plan) -> list[Unit]:
    """Group anchors into units; checks that chains are consecutive and unshared."""
    by_id = {a.op_id: a for a in anchors}
    units: list[Unit] = []
    chained: set[str] = set()
    for chain in plan.chains:
        ops = [by_id[i] for i in chain.ops]
        for prev, nxt in zip(ops, ops[1:]):
            if not nxt.data.same_as(prev.out_var) or prev.out_uses != 1:
                raise PlanError(
                    f"chain {'+'.join(chain.ops)}: {nxt.op_id} is not the only reader of "
                    f"{prev.op_id}'s output, so they cannot share a split"
                )
        units.append(Unit(ops, "split", chain.dim, chain.ratio))
        chained.update(chain.ops)
    for a in anchors:
        if a.op_id not in chained:
            p = plan.placement(a.op_id)
            units.append(Unit([a], p.place, p.dim, p.ratio))
    return units


def _resolve(unit: Unit) -> Unit:
    """Turn ratio 0/1 splits into whole placements and unsplittable ones into a GPU fallback."""
    if unit.place != "split":
        return unit
    try:
        role = whole_role(unit.ops, unit.dim, unit.ratio)
        if role is None:
            (h_parts if unit.dim == "H" else oc_parts)(unit.ops, unit.ratio)
            return unit
        if 0.0 < unit.ratio < 1.0:
            warnings.warn(
                f"{unit.name}: ratio {unit.ratio} leaves the other device no "
                f"{'rows' if unit.dim == 'H' else 'channels'}; running it on the {role}",
                stacklevel=4,
            )
        return Unit(unit.ops, role, None, None)
    except Unsplittable as err:
        warnings.warn(f"{unit.name} left unsplit on the gpu: {err}", stacklevel=4)
        return Unit(unit.ops, "gpu", None, None)


resolve_unit = _resolve
