"""conv2d_transpose as the conv2d it legalizes to, on the project's conv kernels.

TOPI legalizes ``conv2d_transpose`` (groups 1, dilation 1) to four blocks: ``data_dilate``
(zeros between the input's rows and columns, ``stride - 1`` of them), ``data_pad``,
``kernel_transform`` (``w[i, o, KH-1-r, KW-1-s]``: in/out swapped, kernel flipped) and a
stride-1 conv over the padded, dilated input. Recognised here, the op runs on the same direct
(CPU) and tiled (GPU) conv kernels as a conv2d whose input is the dilated one: the dilation and
the flip are inlined into the kernels' own pad/pack stages, so nothing extra is materialised.
Left to the generic fallback it ran as plain serial loops on the CPU: 20 s for
fast-style-transfer's two decoder layers at 480x640 on the H100 machine's 16 cores.
"""

from __future__ import annotations

from collections.abc import Callable

from tvm import te, tirx
from tvm.ir.expr import TensorLoad, Var
from tvm.s_tir import SBlock, Schedule

from .analysis import Conv2DInfo, _consistent, _ints, _is_param, _linear, _loads, _pad_offsets

PROLOGUE = ("codl_dilate", "codl_wflip")


def recognise(func: tirx.PrimFunc, blocks: list[SBlock], k: int
              ) -> tuple[Conv2DInfo, tuple[int, int]] | None:
    """(the stride-1 conv over the dilated input, the input dilation), or None."""
    if k != 3:
        return None
    dilate, pad, flip, main = blocks[:4]
    if len(dilate.reads) != 1 or len(flip.reads) != 1 or len(pad.reads) != 1:
        return None
    x, w = dilate.reads[0].source, flip.reads[0].source
    dil_buf = dilate.writes[0].source
    if not (_is_param(func, x) and _is_param(func, w)
            and pad.reads[0].source.same_as(dil_buf) and _is_flip(flip, w)):
        return None
    step = _dilation(dilate, x)
    offs = _pad_offsets(pad, dil_buf)
    xs, ws, ds = _ints(x.shape), _ints(w.shape), _ints(dil_buf.shape)
    ps, os_ = _ints(pad.writes[0].source.shape), _ints(main.writes[0].source.shape)
    if None in (step, offs, xs, ws, ds, ps, os_) or len(xs) != 4 or len(os_) != 4:
        return None
    c = Conv2DInfo(n=xs[0], ic=xs[1], h=ds[2], w=ds[3], oc=ws[1], ic_per_group=xs[1],
                   kh=ws[2], kw=ws[3], stride=(1, 1), dilation=(1, 1),
                   pad=(offs[0], offs[1], ps[2] - ds[2] - offs[0], ps[3] - ds[3] - offs[1]),
                   oh=os_[2], ow=os_[3])
    if ws[0] != xs[1] or not _consistent(c) or not _is_unit_conv(main, pad, flip):
        return None
    if any((n - 1) * s + 1 != d for n, s, d in zip(xs[2:], step, ds[2:])):
        return None
    return c, step


def _is_flip(flip: SBlock, w: Var) -> bool:
    """``kernel_transform[o, i, r, s] = w[i, o, KH-1-r, KW-1-s]``."""
    loads = [ld for ld in _loads(flip.body) if ld.source.same_as(w)]
    shape = _ints(w.shape)
    if len(loads) != 1 or len(flip.iter_vars) != 4 or shape is None:
        return False
    o, i, r, s = (iv.var for iv in flip.iter_vars)
    want = [(i, [1, 0]), (o, [1, 0]), (r, [-1, shape[2] - 1]), (s, [-1, shape[3] - 1])]
    return all(_linear(idx, [v]) == c for idx, (v, c) in zip(loads[0].indices, want))


def _dilation(dilate: SBlock, x: Var) -> tuple[int, int] | None:
    """The ``s`` of ``x[.., h // s, w // s]`` per spatial axis (1 where the index is ``h``)."""
    loads = [ld for ld in _loads(dilate.body) if ld.source.same_as(x)]
    if len(loads) != 1 or len(loads[0].indices) != 4:
        return None
    steps = []
    for idx in loads[0].indices[2:]:
        if isinstance(idx, tirx.FloorDiv) and isinstance(idx.b, tirx.IntImm):
            steps.append(int(idx.b))
        elif isinstance(idx, Var):
            steps.append(1)
        else:
            return None
    return steps[0], steps[1]


def _is_unit_conv(main: SBlock, pad: SBlock, flip: SBlock) -> bool:
    """``out[b, c, h, w] += pad[b, dc, h + dh, w + dw] * flip[c, dc, dh, dw]``."""
    if len(main.iter_vars) != 7:
        return False
    store = main.body
    mul = store.value.b if isinstance(store, tirx.BufferStore) and isinstance(
        store.value, tirx.Add) else None
    if not isinstance(mul, tirx.Mul):
        return False
    data, weight = mul.a, mul.b
    if not (isinstance(data, TensorLoad) and isinstance(weight, TensorLoad)
            and data.source.same_as(pad.writes[0].source)
            and weight.source.same_as(flip.writes[0].source)):
        return False
    b, c, h, w, dc, dh, dw = (iv.var for iv in main.iter_vars)
    rows, cols = _linear(data.indices[2], [h, dh]), _linear(data.indices[3], [w, dw])
    return rows == [1, 1, 0] and cols == [1, 1, 0] and all(
        isinstance(i, Var) and i.same_as(v)
        for i, v in zip([*data.indices[:2], *weight.indices], [b, dc, c, dc, dh, dw]))


def transposed(c: Conv2DInfo, step: tuple[int, int],
               build: Callable[[te.Tensor, te.Tensor], te.Tensor]) -> Callable:
    """``build`` (a conv kernel over ``c``) fed with the dilated input and flipped weight."""
    sh, sw = step

    def wrapped(x: te.Tensor, w: te.Tensor) -> te.Tensor:
        zero = tirx.const(0.0, x.dtype)
        xd = te.compute(
            (c.n, c.ic, c.h, c.w),
            lambda n, ci, h, ww: tirx.if_then_else(
                tirx.all(h % sh == 0, ww % sw == 0), x[n, ci, h // sh, ww // sw], zero),
            name="codl_dilate")
        wf = te.compute((c.oc, c.ic, c.kh, c.kw),
                        lambda o, i, r, s: w[i, o, c.kh - 1 - r, c.kw - 1 - s], name="codl_wflip")
        return build(xd, wf)

    return wrapped


def inline_prologue(sch: Schedule) -> None:
    """Inline :func:`transposed`'s stages into the kernel's pad and pack stages."""
    for name in PROLOGUE:
        sch.compute_inline(sch.get_sblock(name))
