"""How each partitionable op kind is cut: its split axes, windows and sub-op emitters.

One :class:`SplitRule` per op kind, collected in :data:`RULES`. The pass never branches on op
kinds itself; it asks the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.relax import op as rop

from .geometry import RowPart, TransposedWindow, Window


class Unsplittable(Exception):
    """This op cannot be split the way the plan asks; the message says why."""


def _ints(values) -> list[int]:
    return [int(v) for v in values]


# ---- windows (H axis) ---------------------------------------------------------------------
def _conv_window(call: relax.Call) -> Window:
    a = call.attrs
    _check_layout(a.data_layout, "NCHW", "data layout")
    _check_layout(a.kernel_layout, "OIHW", "kernel layout")
    kh = int(call.args[1].ty.shape[2])
    pad = _ints(a.padding)
    return Window(kh, int(a.strides[0]), int(a.dilation[0]), pad[0], pad[2])


def _pool_window(call: relax.Call) -> Window:
    a = call.attrs
    _check_layout(a.layout, "NCHW", "layout")
    if bool(a.ceil_mode) and call.op.name == "relax.nn.avg_pool2d":
        raise Unsplittable("avg_pool2d with ceil_mode cannot be split by rows")
    pad = _ints(a.padding)
    return Window(int(a.pool_size[0]), int(a.strides[0]), int(a.dilation[0]), pad[0], pad[2])


def _identity_window(call: relax.Call) -> Window:
    return Window(1)


def _check_layout(layout: str, want: str, what: str) -> None:
    if str(layout) != want:
        raise Unsplittable(f"{what} {layout} is not {want}")


# ---- H parts ------------------------------------------------------------------------------
def _conv_h_part(call: relax.Call, args: list[relax.Expr], part: RowPart) -> relax.Expr:
    a = call.attrs
    pad = _ints(a.padding)
    return rop.nn.conv2d(
        args[0],
        args[1],
        strides=_ints(a.strides),
        padding=[part.pad[0], pad[1], part.pad[1], pad[3]],
        dilation=_ints(a.dilation),
        groups=int(a.groups),
        data_layout="NCHW",
        kernel_layout="OIHW",
        out_layout=str(a.out_layout),
        out_dtype=_dtype(a.out_dtype),
    )


def _pool_call(call: relax.Call, data: relax.Expr, padding: list[int], ceil: bool):
    a = call.attrs
    fn = rop.nn.max_pool2d if call.op.name == "relax.nn.max_pool2d" else rop.nn.avg_pool2d
    return fn(
        data,
        pool_size=_ints(a.pool_size),
        strides=_ints(a.strides),
        padding=padding,
        dilation=_ints(a.dilation),
        ceil_mode=ceil,
        count_include_pad=bool(a.count_include_pad),
        layout="NCHW",
        out_layout=str(a.out_layout),
    )


def _pool_h_part(call: relax.Call, args: list[relax.Expr], part: RowPart) -> relax.Expr:
    a = call.attrs
    pad = _ints(a.padding)
    right = pad[3]
    if bool(a.ceil_mode):
        # a part is computed in floor mode; widen the right pad so the W extent is unchanged
        w_in = int(call.args[0].ty.shape[3])
        win = Window(int(a.pool_size[1]), int(a.strides[1]), int(a.dilation[1]), pad[1], pad[3])
        w_out = int(call.ty.shape[3])  # TVM's ceil mode drops a window starting in the padding
        right += max(0, (w_out - 1) * win.stride + win.extent - (w_in + pad[1] + pad[3]))
    return _pool_call(call, args[0], [part.pad[0], pad[1], part.pad[1], right], ceil=False)


def _matmul_h_part(call: relax.Call, args: list[relax.Expr], part: RowPart) -> relax.Expr:
    return rop.matmul(args[0], args[1], out_dtype=_out_dtype(call))


def _dtype(dtype) -> str | None:
    text = str(dtype) if dtype is not None else ""
    return None if text in ("", "None", "void") else text


def _out_dtype(call: relax.Call) -> str | None:
    return _dtype(call.attrs.out_dtype) if call.attrs is not None else None


# ---- OC parts -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ChannelUnits:
    """An OC split works in units: ``count`` units of ``out_per`` output channels, each reading
    ``in_per`` input channels (``in_per`` is None when every part reads all input channels)."""

    count: int
    out_per: int
    in_per: int | None


def _conv_units(call: relax.Call) -> ChannelUnits:
    groups = int(call.attrs.groups)
    oc = int(call.args[1].ty.shape[0])
    if groups == 1:
        return ChannelUnits(oc, 1, None)
    ic = int(call.args[0].ty.shape[1])
    return ChannelUnits(groups, oc // groups, ic // groups)


def _pool_units(call: relax.Call) -> ChannelUnits:
    return ChannelUnits(int(call.args[0].ty.shape[1]), 1, 1)


def _matmul_units(call: relax.Call) -> ChannelUnits:
    if len(call.args[1].ty.shape) != 2:
        raise Unsplittable("matmul with a batched right operand cannot be split by columns")
    return ChannelUnits(int(call.args[1].ty.shape[1]), 1, None)


def slice_const(expr: relax.Expr, axis: int, start: int, end: int) -> relax.Expr:
    """Slice ``expr`` on ``axis``: constants at compile time (one copy per device), other
    values with ``strided_slice`` at run time."""
    if isinstance(expr, tvm.ir.Constant):
        index = [slice(None)] * len(expr.value.shape)
        index[axis] = slice(start, end)
        return relax.const(np.ascontiguousarray(expr.value.numpy()[tuple(index)]))
    return rop.strided_slice(expr, [axis], [start], [end])


def _conv_oc_part(call: relax.Call, args: list[relax.Expr], units: tuple[int, int]) -> relax.Expr:
    a = call.attrs
    cu = _conv_units(call)
    weight = slice_const(args[1], 0, units[0] * cu.out_per, units[1] * cu.out_per)
    groups = 1 if cu.in_per is None else units[1] - units[0]
    return rop.nn.conv2d(
        args[0],
        weight,
        strides=_ints(a.strides),
        padding=_ints(a.padding),
        dilation=_ints(a.dilation),
        groups=groups,
        data_layout="NCHW",
        kernel_layout="OIHW",
        out_layout=str(a.out_layout),
        out_dtype=_dtype(a.out_dtype),
    )


def _transpose_units(call: relax.Call) -> ChannelUnits:
    _check_transpose(call)
    return ChannelUnits(int(call.args[1].ty.shape[1]), 1, None)


def _check_transpose(call: relax.Call) -> None:
    a = call.attrs
    _check_layout(a.data_layout, "NCHW", "data layout")
    _check_layout(a.kernel_layout, "IOHW", "kernel layout")
    if int(a.groups) != 1:
        raise Unsplittable("a grouped conv2d_transpose cannot be split")


def _transpose_window(call: relax.Call) -> Window:
    _check_transpose(call)
    a = call.attrs
    kernel, stride, pad = int(call.args[1].ty.shape[2]), int(a.strides[0]), _ints(a.padding)
    # within these bounds every row part has a padding form (transposed_row_padding)
    if int(a.dilation[0]) != 1 or stride > kernel or max(pad[0], pad[2]) > kernel - 1:
        raise Unsplittable("a conv2d_transpose with dilation, a stride past its kernel or a "
                           "padding past its kernel cannot be split by rows")
    return TransposedWindow(kernel, stride, 1, pad[0], pad[2])


def transposed_row_padding(kernel: int, stride: int, pad_top: int, part: RowPart
                           ) -> tuple[int, int, int]:
    """(top padding, bottom padding, output padding) of the conv2d_transpose over the input
    rows ``part.src`` that makes exactly the output rows ``part.out`` of the unsplit op
    (``pad_top``: its top padding). In the dilated-conv view the part's first input row must
    sit ``P' = i0 * stride - a + (kernel - 1 - pad_top)`` rows below the top of its padded
    input, and the bottom padding fills the rest of the ``b - a + kernel - 1`` rows read;
    what the bottom needs beyond ``kernel - 1`` rows is output padding."""
    (i0, i1), (a, b) = part.src, part.out
    lead = i0 * stride - a + kernel - 1 - pad_top
    tail = b - a + kernel - 2 - (i1 - i0 - 1) * stride - lead
    if not 0 <= lead <= kernel - 1 or tail < 0:
        raise Unsplittable(f"a conv2d_transpose part of rows {part.out} has no padding form")
    if tail <= kernel - 1:
        return kernel - 1 - lead, kernel - 1 - tail, 0
    if tail - (kernel - 1) >= stride:
        raise Unsplittable(f"a conv2d_transpose part of rows {part.out} needs output padding "
                           f"past its stride {stride}")
    return kernel - 1 - lead, 0, tail - (kernel - 1)


def _transpose_h_part(call: relax.Call, args: list[relax.Expr], part: RowPart) -> relax.Expr:
    a = call.attrs
    pad, stride = _ints(a.padding), _ints(a.strides)
    top, bottom, extra = transposed_row_padding(int(call.args[1].ty.shape[2]), stride[0],
                                                pad[0], part)
    return _transpose_call(call, args[0], args[1], [top, pad[1], bottom, pad[3]],
                           [extra, int(a.output_padding[1])])


def _transpose_call(call: relax.Call, data: relax.Expr, weight: relax.Expr,
                    padding: list[int], output_padding: list[int]) -> relax.Expr:
    a = call.attrs
    return rop.nn.conv2d_transpose(
        data,
        weight,
        strides=_ints(a.strides),
        padding=padding,
        output_padding=output_padding,
        dilation=_ints(a.dilation),
        groups=1,
        data_layout="NCHW",
        kernel_layout="IOHW",
        out_layout=str(a.out_layout),
        out_dtype=_dtype(a.out_dtype),
    )


def _transpose_oc_part(call: relax.Call, args: list[relax.Expr], units: tuple[int, int]
                       ) -> relax.Expr:
    a = call.attrs
    weight = slice_const(args[1], 1, units[0], units[1])  # IOHW: output channels on axis 1
    return _transpose_call(call, args[0], weight, _ints(a.padding), _ints(a.output_padding))


def _pool_oc_part(call: relax.Call, args: list[relax.Expr], units: tuple[int, int]) -> relax.Expr:
    return _pool_call(call, args[0], _ints(call.attrs.padding), bool(call.attrs.ceil_mode))


def _matmul_oc_part(call: relax.Call, args: list[relax.Expr], units: tuple[int, int]) -> relax.Expr:
    weight = slice_const(args[1], 1, units[0], units[1])
    return rop.matmul(args[0], weight, out_dtype=_out_dtype(call))


@dataclass(frozen=True)
class SplitRule:
    """Everything the pass needs to cut one op kind."""

    h_axis: Callable[[relax.Call], int]
    oc_axis: Callable[[relax.Call], int]
    window: Callable[[relax.Call], Window]
    # emitters get the original call (for attributes and shapes) and the sub-op's arguments
    h_part: Callable[[relax.Call, list[relax.Expr], RowPart], relax.Expr]
    units: Callable[[relax.Call], ChannelUnits]
    oc_part: Callable[[relax.Call, list[relax.Expr], tuple[int, int]], relax.Expr]
    channel_local: Callable[[relax.Call], bool]  # may follow the head of an OC chain


def _nchw_h(call: relax.Call) -> int:
    return 2


def _nchw_c(call: relax.Call) -> int:
    return 1


def _rows_axis(call: relax.Call) -> int:
    return len(call.args[0].ty.shape) - 2


def _cols_axis(call: relax.Call) -> int:
    return len(call.args[0].ty.shape) - 1


def _depthwise(call: relax.Call) -> bool:
    return int(call.attrs.groups) == int(call.args[0].ty.shape[1]) > 1


def _matmul_window(call: relax.Call) -> Window:
    if len(call.args[0].ty.shape) < 2:
        raise Unsplittable("matmul of a vector has no rows to split")
    return _identity_window(call)


RULES: dict[str, SplitRule] = {
    "conv2d": SplitRule(
        _nchw_h, _nchw_c, _conv_window, _conv_h_part, _conv_units, _conv_oc_part, _depthwise
    ),
    "max_pool2d": SplitRule(
        _nchw_h, _nchw_c, _pool_window, _pool_h_part, _pool_units, _pool_oc_part,
        lambda call: True,
    ),
    "avg_pool2d": SplitRule(
        _nchw_h, _nchw_c, _pool_window, _pool_h_part, _pool_units, _pool_oc_part,
        lambda call: True,
    ),
    "conv2d_transpose": SplitRule(
        _nchw_h, _nchw_c, _transpose_window, _transpose_h_part, _transpose_units,
        _transpose_oc_part, lambda call: False,
    ),
    "matmul": SplitRule(
        _rows_axis, _cols_axis, _matmul_window, _matmul_h_part, _matmul_units, _matmul_oc_part,
        lambda call: False,
    ),
}
