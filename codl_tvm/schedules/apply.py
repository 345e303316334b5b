"""The module pass the compile pipeline runs after LegalizeOps."""

from __future__ import annotations

import logging

import tvm
from tvm import relax, tirx

from .analysis import target_of
from .blocking import ATTR_KEY, attach
from .dispatch import schedule_func
from .prepack import PREPACK_ATTR, capture
from .target_info import target_info

log = logging.getLogger(__name__)
SUFFIX = {"kernel": "prepacked", "pack": "weight_pack"}  # names of a kernel's two versions


@tvm.transform.module_pass(opt_level=0, name="codl.ApplySchedules")
class ApplySchedules:
    """Schedule every PrimFunc that carries a ``target`` attribute.

    Each PrimFunc is classified (conv2d, depthwise/grouped conv2d, pool2d, matmul,
    elementwise), scheduled by the first matching row of :data:`dispatch.RULES` for its
    target family, and annotated with ``codl.blocking`` (a :class:`Blocking` as JSON).
    PrimFuncs without a target, or already scheduled, are left as they are.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext):
        updates, versions = {}, {}
        for gvar, func in mod.functions.items():
            if not isinstance(func, tirx.PrimFunc) or ATTR_KEY in (func.attrs or {}):
                continue
            target = target_of(func)
            if target is None or _is_scheduled(func):
                continue
            with capture() as offered:
                new, blocking, skipped = schedule_func(func, target, target_info(target))
            for reason in skipped:
                log.info("%s: rule skipped (%s)", gvar.name_hint, reason)
            new = new.with_attr("target", target).with_attr("tirx.is_scheduled", True)
            if offered:
                versions[gvar] = dict(offered)
            updates[gvar] = attach(new, blocking)
        for gvar, func in updates.items():
            mod[gvar] = func
        return _add_prepacked(mod, versions) if versions else mod


def _add_prepacked(mod: tvm.IRModule, versions: dict) -> tvm.IRModule:
    """Each kernel's version that reads a packed weight, and its weight pass, as functions of
    the module; the kernel names them in :data:`PREPACK_ATTR` (for
    :class:`codl_tvm.passes.PrepackWeights`, which drops what it does not call)."""
    bb = relax.BlockBuilder(mod)
    for gvar, parts in versions.items():
        func = bb.get()[gvar]
        target = func.attrs["target"]
        names = {}
        for role, part in parts.items():
            part = part.with_attr("target", target).with_attr("tirx.is_scheduled", True)
            if role == "kernel":  # the same kernel: the same blocking
                part = part.with_attr(ATTR_KEY, func.attrs[ATTR_KEY])
            added = bb.add_func(part, _named(gvar.name_hint, SUFFIX[role]))
            bb.update_func(added, part.with_attr("global_symbol", added.name_hint))
            names[role] = added.name_hint
        bb.update_func(gvar, func.with_attr(PREPACK_ATTR, names))
    return bb.get()


def _is_scheduled(func: tirx.PrimFunc) -> bool:
    attrs = func.attrs or {}
    return "tirx.is_scheduled" in attrs and bool(attrs["tirx.is_scheduled"])


def _named(name: str, suffix: str) -> str:
    """``name`` with ``suffix`` before its device suffix (``_d0``: ``BindKernelTargets``)."""
    stem, sep, dev = name.rpartition("_d")
    return f"{stem}_{suffix}{sep}{dev}" if sep and dev.isdigit() else f"{name}_{suffix}"
