"""Kernels whose weight layout pass can run once, at compile time, instead of every call.

The CPU conv and matmul kernels copy their weight into the layout their register tile reads
(``codl_wpack``: channel blocks, GEMM panels, Winograd's ``U = G g G^T``). Weights are
constants of the model, so that pass can run once when the module is compiled:
:class:`WeightPacked` splits a kernel's ``te`` builder into its weight pass (``pack``) and the
rest (``body``), and :func:`offer` builds the scheduled kernel's second version, which reads
the packed weight as its parameter, and the pack as a PrimFunc of its own;
:class:`~.apply.ApplySchedules` adds both to the module and names them in the kernel's
:data:`PREPACK_ATTR`. The
Relax pass :class:`codl_tvm.passes.PrepackWeights` picks the second version where the
weight is a constant it knows, runs the packs on the host and drops the unused versions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from tvm import te, tirx
from tvm.s_tir import Schedule

from .rebuild import rebuild

PREPACK_ATTR = "codl.prepack"
WEIGHT_PARAM = 1  # the kernels' (data, weight, ...) parameter order


@dataclass(frozen=True)
class WeightPacked:
    """A kernel builder ``(x, w) -> out`` made of a weight pass and the rest.

    Attributes
    ----------
    pack : callable
        ``w -> packed``: the weight in the layout the kernel reads (a ``te`` tensor).
    body : callable
        ``(x, packed) -> out``: everything else.
    """

    pack: Callable[[te.Tensor], te.Tensor]
    body: Callable[[te.Tensor, te.Tensor], te.Tensor]

    def __call__(self, x: te.Tensor, w: te.Tensor) -> te.Tensor:
        return self.body(x, self.pack(w))


def pack_func(kernel: WeightPacked, weight: tirx.Var | tirx.Buffer) -> tirx.PrimFunc:
    """The weight pass alone, as a PrimFunc ``(w, packed)``, parallel over its outer loops."""
    w = te.placeholder(tuple(weight.shape), str(weight.dtype), name="w")
    func = te.create_prim_func([w, kernel.pack(w)])
    sch = Schedule(func)
    *before, last = sch.get_child_blocks(sch.get_sblock("root"))
    for block in before:  # a transposed conv's flip: read where it is packed
        sch.compute_inline(block)
    sch.parallel(sch.get_loops(last)[0])
    return sch.mod["main"]


def packed_version(
    func: tirx.PrimFunc, main_block: str, kernel: WeightPacked,
    schedule: Callable[[Schedule], object], finish: Callable[[Schedule], object],
) -> tirx.PrimFunc:
    """``func``'s kernel with the packed weight as its parameter, scheduled as the original
    (``schedule`` then ``finish``, which skip the weight pass the version has not got)."""
    weight = func.params[WEIGHT_PARAM]
    packed = kernel.pack(te.placeholder(tuple(weight.shape), str(weight.dtype), name="w"))
    holder = te.placeholder(tuple(packed.shape), packed.dtype, name=f"{weight.name}_packed")
    new = rebuild(func, main_block, kernel.body, 2, {WEIGHT_PARAM: holder})
    sch = Schedule(new)
    schedule(sch)
    finish(sch)
    return sch.mod["main"]


_OFFERS: ContextVar[dict | None] = ContextVar("codl_prepack_offers", default=None)


@contextlib.contextmanager
def capture() -> Iterator[dict]:
    """Collect what :func:`offer` gives while scheduling one PrimFunc: after a kernel with a
    weight pass, ``{"kernel": its packed version, "pack": its weight pass}``, else ``{}``."""
    box: dict = {}
    token = _OFFERS.set(box)
    try:
        yield box
    finally:
        _OFFERS.reset(token)


def offer(
    func: tirx.PrimFunc, main_block: str, kernel: Callable, schedule: Callable[[Schedule], object],
    finish: Callable[[Schedule], object],
) -> None:
    """Inside :func:`capture`: build the packed version of the kernel just scheduled and its
    weight pass, where ``kernel`` has one (:class:`WeightPacked`)."""
    box = _OFFERS.get()
    if box is None:
        return
    box.clear()
    if isinstance(kernel, WeightPacked):
        box["kernel"] = packed_version(func, main_block, kernel, schedule, finish)
        box["pack"] = pack_func(kernel, func.params[WEIGHT_PARAM])


def has_block(sch: Schedule, name: str) -> bool:
    """Whether ``sch`` has a block named ``name`` (a packed version lacks its weight pass)."""
    with contextlib.suppress(Exception):
        sch.get_sblock(name)
        return True
    return False
