"""Recognise the op a legalized PrimFunc computes (conv2d, conv2d_transpose, pool2d, matmul,
elementwise).

LegalizeOps output is regular: an optional ``pad_temp`` block, one reduction block, then
(after FuseOps/FuseTIR) injective epilogue blocks. Conv parameters are read back from the
index expressions of the reduction block, so a rule never trusts a block name.
"""

from __future__ import annotations

import dataclasses
import math

import tvm
from tvm import tirx
from tvm.ir.expr import TensorLoad, Var
from tvm.s_tir import SBlock, Schedule
from tvm.sym.pattern import detect_linear_equation

REDUCE = 2  # IterVar.CommReduce


@dataclasses.dataclass(frozen=True)
class Conv2DInfo:
    """Geometry of an NCHW/OIHW conv2d (batch ``n``), as the legalized PrimFunc computes it."""

    n: int
    ic: int
    h: int
    w: int
    oc: int
    ic_per_group: int
    kh: int
    kw: int
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pad: tuple[int, int, int, int]  # top, left, bottom, right
    oh: int
    ow: int

    @property
    def groups(self) -> int:
        return self.ic // self.ic_per_group

    @property
    def depthwise(self) -> bool:
        return self.ic_per_group == 1 and self.groups == self.ic and self.oc == self.ic

    @property
    def flops(self) -> int:
        return 2 * self.n * self.oc * self.oh * self.ow * self.ic_per_group * self.kh * self.kw


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """What a PrimFunc computes: kind, main block, output shape, and the conv geometry."""

    kind: str  # conv2d | depthwise_conv2d | group_conv2d | pool2d | matmul | elementwise | unknown
    main_block: str | None
    out_shape: tuple[int, ...]
    dtype: str
    conv: Conv2DInfo | None = None
    epilogue: tuple[str, ...] = ()
    prologue: tuple[str, ...] = ()
    reduce_size: int = 0  # elements reduced into one output (a pool's window); 0 if unknown
    # conv2d_transpose: ``conv`` is the stride-1 conv over the input dilated by this much
    input_dilation: tuple[int, int] = (1, 1)


def leaf_blocks(func: tirx.PrimFunc) -> list[SBlock]:
    """Blocks directly under the root block of ``func``, in program order."""
    sch = Schedule(func)
    try:
        children = sch.get_child_blocks(sch.get_sblock("root"))
    except Exception:  # noqa: BLE001 - no root block: nothing to recognise
        return []
    return [sch.get(b) for b in children]


def _is_reduction(block: SBlock) -> bool:
    return any(int(iv.iter_type) == REDUCE for iv in block.iter_vars)


def _ints(shape: object) -> tuple[int, ...] | None:
    try:
        return tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        return None  # symbolic shape


_CHILD_FIELDS = ("a", "b", "args", "value", "condition", "true_value", "false_value")


def _loads(expr: object) -> list[TensorLoad]:
    """BufferLoads inside an expression (TVM 0.27 exposes no TIR visitor to Python)."""
    if isinstance(expr, TensorLoad):
        return [expr]
    found: list[TensorLoad] = []
    for field in _CHILD_FIELDS:
        child = getattr(expr, field, None)
        if child is None or isinstance(child, (str, int, float)):
            continue
        items = list(child) if field == "args" else [child]
        for item in items:
            found.extend(_loads(item))
    return found


def _linear(expr: object, variables: list[tirx.Var]) -> list[int] | None:
    coeffs = detect_linear_equation(expr, variables)
    if len(coeffs) != len(variables) + 1:
        return None
    try:
        return [int(c) for c in coeffs]
    except (TypeError, ValueError):
        return None


def _pad_offsets(pad_block: SBlock, src: Var) -> tuple[int, int] | None:
    """(top, left) of a pad block ``P[i] = if_then_else(..., X[i - off], 0)``."""
    loads = [ld for ld in _loads(pad_block.body) if ld.source.same_as(src)]
    if len(loads) != 1 or len(pad_block.iter_vars) != 4:
        return None
    ivs = [iv.var for iv in pad_block.iter_vars]
    offs = []
    for axis in (2, 3):
        c = _linear(loads[0].indices[axis], [ivs[axis]])
        if c is None or c[0] != 1:
            return None
        offs.append(-c[1])
    for axis in (0, 1):
        c = _linear(loads[0].indices[axis], [ivs[axis]])
        if c is None or c != [1, 0]:
            return None
    return offs[0], offs[1]


def _conv_info(func: tirx.PrimFunc, blocks: list[SBlock], k: int) -> Conv2DInfo | None:
    block = blocks[k]
    if len(block.iter_vars) != 7 or len(block.writes) != 1:
        return None
    store = block.body
    if not isinstance(store, tirx.BufferStore) or not isinstance(store.value, tirx.Add):
        return None
    mul = store.value.b
    if not isinstance(mul, tirx.Mul):
        return None
    data, weight = mul.a, mul.b
    if not (isinstance(data, TensorLoad) and isinstance(weight, TensorLoad)):
        return None
    wshape = _ints(weight.source.shape)
    oshape = _ints(store.buffer.shape)
    if wshape is None or oshape is None or len(wshape) != 4 or len(oshape) != 4:
        return None
    ivs = [iv.var for iv in block.iter_vars]
    yy, xx, ry, rx = ivs[2], ivs[3], ivs[5], ivs[6]
    hc = _linear(data.indices[2], [yy, ry])
    wc = _linear(data.indices[3], [xx, rx])
    if hc is None or wc is None or hc[2] != 0 or wc[2] != 0:
        return None
    src = data.source
    pad = (0, 0, 0, 0)
    if not _is_param(func, src):
        producers = [b for b in blocks[:k] if any(w.source.same_as(src) for w in b.writes)]
        if len(producers) != 1 or len(producers[0].reads) != 1:
            return None
        padded = _ints(src.shape)
        x = producers[0].reads[0].source
        offs = _pad_offsets(producers[0], x)
        xshape = _ints(x.shape)
        if offs is None or xshape is None or padded is None:
            return None
        top, left = offs
        pad = (top, left, padded[2] - xshape[2] - top, padded[3] - xshape[3] - left)
        src = x
    # conv2d_transpose legalizes to a conv over a dilated input and a flipped kernel: both
    # are intermediate buffers, and a rebuilt kernel reading the params would drop them
    if not (_is_param(func, src) and _is_param(func, weight.source)):
        return None
    xshape = _ints(src.shape)
    if xshape is None or len(xshape) != 4 or xshape[1] % wshape[1] != 0:
        return None
    info = Conv2DInfo(
        n=xshape[0], ic=xshape[1], h=xshape[2], w=xshape[3], oc=wshape[0],
        ic_per_group=wshape[1], kh=wshape[2], kw=wshape[3], stride=(hc[0], wc[0]),
        dilation=(hc[1], wc[1]), pad=pad, oh=oshape[2], ow=oshape[3],
    )
    return info if _consistent(info) else None


def _is_param(func: tirx.PrimFunc, buf: Var) -> bool:
    return any(buf.same_as(p) for p in func.params)


def _consistent(c: Conv2DInfo) -> bool:
    """Cross-check the recovered geometry against the output shape."""
    oh = (c.h + c.pad[0] + c.pad[2] - c.dilation[0] * (c.kh - 1) - 1) // c.stride[0] + 1
    ow = (c.w + c.pad[1] + c.pad[3] - c.dilation[1] * (c.kw - 1) - 1) // c.stride[1] + 1
    return (oh, ow) == (c.oh, c.ow) and min(c.pad) >= 0 and c.oc % c.groups == 0


def _lead(block: SBlock) -> int:
    """How many batch axes lead a matmul block's row and column axes (a [1, M, K] activation
    times a [K, N] weight: a transformer's dense layer; [1, H, W, C] x [C, N]: ConvNeXt's)."""
    return len(block.iter_vars) - 3


def _is_matmul(block: SBlock) -> bool:
    kinds = [int(iv.iter_type) for iv in block.iter_vars]
    store = block.body
    lead = _lead(block)
    if lead < 0 or kinds != [0] * (lead + 2) + [REDUCE] or not isinstance(
            store, tirx.BufferStore):
        return False
    mul = store.value.b if isinstance(store.value, tirx.Add) else None
    if not isinstance(mul, tirx.Mul):
        return False
    a, b = mul.a, mul.b
    return isinstance(a, TensorLoad) and isinstance(b, TensorLoad) and (
        len(a.indices) == lead + 2 and len(b.indices) in (2, lead + 2)
    )


def analyze(func: tirx.PrimFunc) -> OpInfo:
    """Classify ``func``; ``kind == "unknown"`` when no pattern matches."""
    blocks = leaf_blocks(func)
    out_buf = func.params[-1]
    out_shape = _ints(out_buf.shape) or ()
    dtype = str(out_buf.dtype)
    reductions = [i for i, b in enumerate(blocks) if _is_reduction(b)]
    if not reductions:
        return OpInfo("elementwise" if blocks else "unknown", None, out_shape, dtype)
    if len(reductions) != 1:
        return OpInfo("unknown", None, out_shape, dtype)
    k = reductions[0]
    block = blocks[k]
    pro = tuple(b.name_hint for b in blocks[:k])
    epi = tuple(b.name_hint for b in blocks[k + 1 :])
    n_iter = len(block.iter_vars)
    conv = _conv_info(func, blocks, k) if n_iter == 7 else None
    if conv is not None:
        kind = "conv2d" if conv.groups == 1 else (
            "depthwise_conv2d" if conv.depthwise else "group_conv2d"
        )
        return OpInfo(kind, block.name_hint, out_shape, dtype, conv, epi, pro)
    if n_iter == 7:
        found = _conv_transpose_info(func, blocks, k)
        if found is not None:
            return OpInfo("conv2d_transpose", block.name_hint, out_shape, dtype, found[0], epi,
                          pro, input_dilation=found[1])
    if n_iter == 6 and [int(iv.iter_type) for iv in block.iter_vars][4:] == [REDUCE, REDUCE]:
        return OpInfo("pool2d", block.name_hint, out_shape, dtype, None, epi, pro,
                      _reduce_size(block))
    if _is_matmul(block) and not pro:
        return OpInfo("matmul", block.name_hint, out_shape, dtype, None, epi, pro)
    return OpInfo("unknown", block.name_hint, out_shape, dtype, None, epi, pro)


def _conv_transpose_info(func: tirx.PrimFunc, blocks: list[SBlock], k: int
                         ) -> tuple[Conv2DInfo, tuple[int, int]] | None:
    """conv2d_transpose as TOPI legalizes it (``data_dilate``, ``data_pad``,
    ``kernel_transform``, a stride-1 conv; see :mod:`.conv_transpose`): (the stride-1 conv over
    the dilated input, the input dilation), or None."""
    if k != 3:
        return None
    dilate, pad, flip, main = blocks[:4]
    if len(dilate.reads) != 1 or len(flip.reads) != 1 or len(pad.reads) != 1:
        return None
    x, w = dilate.reads[0].source, flip.reads[0].source
    dil_buf = dilate.writes[0].source
    if not (_is_param(func, x) and _is_param(func, w)
            and pad.reads[0].source.same_as(dil_buf) and _is_kernel_flip(flip, w)):
        return None
    step = _input_dilation(dilate, x)
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


def _is_kernel_flip(flip: SBlock, w: Var) -> bool:
    """``kernel_transform[o, i, r, s] = w[i, o, KH-1-r, KW-1-s]``."""
    loads = [ld for ld in _loads(flip.body) if ld.source.same_as(w)]
    shape = _ints(w.shape)
    if len(loads) != 1 or len(flip.iter_vars) != 4 or shape is None:
        return False
    o, i, r, s = (iv.var for iv in flip.iter_vars)
    want = [(i, [1, 0]), (o, [1, 0]), (r, [-1, shape[2] - 1]), (s, [-1, shape[3] - 1])]
    return all(_linear(idx, [v]) == c for idx, (v, c) in zip(loads[0].indices, want))


def _input_dilation(dilate: SBlock, x: Var) -> tuple[int, int] | None:
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


def _reduce_size(block: SBlock) -> int:
    extents = [_ints([iv.dom.extent]) for iv in block.iter_vars if int(iv.iter_type) == REDUCE]
    return math.prod(e[0] for e in extents) if all(extents) else 0


def target_of(func: tirx.PrimFunc) -> tvm.target.Target | None:
    """The ``target`` attribute of ``func``, if any."""
    if func.attrs is None or "target" not in func.attrs:
        return None
    return func.attrs["target"]


def matmul_dims(func: tirx.PrimFunc) -> tuple[int, int, int, tuple[int, ...], bool] | None:
    """(M, K, N, lead, batched) when ``func``'s matmul block is ``out[b.., i, j] +=
    p0[b.., i, k] * p1[k, j]`` (``lead``: the extents of the axes ``b..``, more rows of a
    2-D weight) or, ``batched``, ``... * p1[b.., k, j]`` (one matmul per index of ``b..``:
    attention's Q K^T and P V)."""
    info_blocks = [b for b in leaf_blocks(func) if _is_reduction(b)]
    if len(info_blocks) != 1 or not _is_matmul(info_blocks[0]) or len(func.params) < 3:
        return None
    block = info_blocks[0]
    lead = _lead(block)
    *batch, i, j, k = (iv.var for iv in block.iter_vars)
    mul = block.body.value.b
    a, b = mul.a, mul.b
    same = [
        a.source.same_as(func.params[0]), b.source.same_as(func.params[1]),
        all(x.same_as(y) for x, y in zip(a.indices, (*batch, i, k), strict=True)),
    ]
    batched = len(b.indices) > 2
    same.append(all(x.same_as(y) for x, y in zip(
        b.indices, (*batch, k, j) if batched else (k, j), strict=True)))
    shape_a, shape_b = _ints(a.source.shape), _ints(b.source.shape)
    if not all(same) or shape_a is None or shape_b is None:
        return None
    return shape_a[lead], shape_a[lead + 1], shape_b[-1], tuple(shape_a[:lead]), batched
