"""The module pass the compile pipeline runs after LegalizeOps."""

from __future__ import annotations

import logging

import tvm
from tvm import tirx

from .analysis import target_of
from .blocking import ATTR_KEY, attach
from .dispatch import schedule_func
from .target_info import target_info

log = logging.getLogger(__name__)


@tvm.transform.module_pass(opt_level=0, name="codl.ApplySchedules")
class ApplySchedules:
    """Schedule every PrimFunc that carries a ``target`` attribute.

    Each PrimFunc is classified (conv2d, depthwise/grouped conv2d, pool2d, matmul,
    elementwise), scheduled by the first matching row of :data:`dispatch.RULES` for its
    target family, and annotated with ``codl.blocking`` (a :class:`Blocking` as JSON).
    PrimFuncs without a target, or already scheduled, are left as they are.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext):
        updates = {}
        for gvar, func in mod.functions.items():
            if not isinstance(func, tirx.PrimFunc) or ATTR_KEY in (func.attrs or {}):
                continue
            target = target_of(func)
            if target is None or _is_scheduled(func):
                continue
            new, blocking, skipped = schedule_func(func, target, target_info(target))
            for reason in skipped:
                log.info("%s: rule skipped (%s)", gvar.name_hint, reason)
            new = new.with_attr("target", target).with_attr("tirx.is_scheduled", True)
            updates[gvar] = attach(new, blocking)
        for gvar, func in updates.items():
            mod[gvar] = func
        return mod


def _is_scheduled(func: tirx.PrimFunc) -> bool:
    attrs = func.attrs or {}
    return "tirx.is_scheduled" in attrs and bool(attrs["tirx.is_scheduled"])
