"""conv2d_transpose as the conv2d it legalizes to, on the project's conv kernels.

TOPI legalizes ``conv2d_transpose`` (groups 1, dilation 1) to four blocks: ``data_dilate``
(zeros between the input's rows and columns, ``stride - 1`` of them), ``data_pad``,
``kernel_transform`` (``w[i, o, KH-1-r, KW-1-s]``: in/out swapped, kernel flipped) and a
stride-1 conv over the padded, dilated input. Recognised by :mod:`.analysis` (kind
``conv2d_transpose``), the op runs here on the same direct (CPU) and tiled (GPU) conv kernels
as a conv2d whose input is the dilated one: the dilation and the flip are inlined into the
kernels' own pad/pack stages, so nothing extra is materialised (on the CPU the flip runs with
the weight's packing, once at load: :mod:`.prepack`).
Left to the generic fallback it ran as plain serial loops on the CPU: 20 s for
fast-style-transfer's two decoder layers at 480x640 on the H100 machine's 16 cores.
"""

from __future__ import annotations

from collections.abc import Callable

from tvm import te, tirx
from tvm.s_tir import Schedule

from .analysis import Conv2DInfo
from .prepack import WeightPacked, has_block

PROLOGUE = ("codl_dilate", "codl_wflip")


def transposed(c: Conv2DInfo, step: tuple[int, int],
               build: Callable[[te.Tensor, te.Tensor], te.Tensor]) -> Callable:
    """``build`` (a conv kernel over ``c``) fed with the dilated input and flipped weight; a
    kernel with a weight pass (:class:`~.prepack.WeightPacked`) keeps it apart, the flip in it."""
    sh, sw = step

    def dilate(x: te.Tensor) -> te.Tensor:
        zero = tirx.const(0.0, x.dtype)
        return te.compute(
            (c.n, c.ic, c.h, c.w),
            lambda n, ci, h, ww: tirx.if_then_else(
                tirx.all(h % sh == 0, ww % sw == 0), x[n, ci, h // sh, ww // sw], zero),
            name="codl_dilate")

    def flip(w: te.Tensor) -> te.Tensor:
        return te.compute((c.oc, c.ic, c.kh, c.kw),
                          lambda o, i, r, s: w[i, o, c.kh - 1 - r, c.kw - 1 - s],
                          name="codl_wflip")

    if isinstance(build, WeightPacked):
        return WeightPacked(lambda w: build.pack(flip(w)), lambda x, wp: build.body(dilate(x), wp))
    return lambda x, w: build(dilate(x), flip(w))


def inline_prologue(sch: Schedule) -> None:
    """Inline :func:`transposed`'s stages into the kernel's pad and pack stages."""
    for name in PROLOGUE:
        if has_block(sch, name):  # the version that reads a packed weight has no flip
            sch.compute_inline(sch.get_sblock(name))
