"""Pure-python op records the planner searches over (no TVM import).

:func:`codl_tvm.planner.opgraph.build_graph` makes them from a Relax module; the search
(:mod:`codl_tvm.planner.search`) and the strategies only read them, so a plan can be searched
wherever numpy is (e.g. next to a runtime-only TVM).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from codl_tvm.predictor.opspec import OpSpec, conv_kind

BYTES_PER_ELEM = 4


@dataclass
class OpNode:
    """One partitionable op of a model, as the planner sees it.

    Attributes
    ----------
    op_id : str
        Id from :func:`codl_tvm.list_ops` (``conv2d_3``).
    kind : str
        Anchor kind (conv2d, conv2d_transpose, matmul, max_pool2d, avg_pool2d).
    spec : OpSpec or None
        Predictor description; None for ops the planner cannot cost (batched matmul), which
        stay on the GPU.
    order : int
        Position in data-flow (binding) order.
    in_shape, out_shape : list of int
        Shapes of the data input and of the output.
    weight_bytes : int
        Bytes of the op's weight (0 for pooling).
    dims : tuple of str
        Dims the op can really be split on (extent > 1).
    preds : list of str
        Ops whose output reaches this op's inputs through non-partitionable ops only.
    chain_next : dict
        ``{"H": bool, "OC": bool}``: the next op in order reads only this op's output (and,
        for OC, keeps channels), so a chain may continue from here to it.
    input_key : int
        Identity of the data input value: ops with equal keys are parallel branch heads.
    repeat : int
        Batch repeats of ``spec`` (an OpSpec is batch 1).
    """

    op_id: str
    kind: str
    spec: OpSpec | None
    order: int
    in_shape: list[int]
    out_shape: list[int]
    weight_bytes: int = 0
    dims: tuple[str, ...] = ()
    preds: list[str] = field(default_factory=list)
    chain_next: dict[str, bool] = field(default_factory=dict)
    input_key: int = -1
    repeat: int = 1

    @property
    def transposed(self) -> bool:
        """A conv2d_transpose: ``spec`` is the stride-1 conv over its dilated input."""
        return self.kind == "conv2d_transpose"

    @property
    def in_bytes(self) -> int:
        return math.prod(self.in_shape) * BYTES_PER_ELEM

    @property
    def out_bytes(self) -> int:
        return math.prod(self.out_shape) * BYTES_PER_ELEM

    @property
    def flops(self) -> int:
        return self.spec.flops * self.repeat if self.spec is not None else 0

    def to_json(self) -> dict:
        doc = {k: getattr(self, k) for k in ("op_id", "kind", "order", "in_shape", "out_shape",
                                            "weight_bytes", "preds", "chain_next", "input_key",
                                            "repeat")}
        doc["dims"] = list(self.dims)
        doc["spec"] = self.spec.to_json() if self.spec is not None else None
        return doc

    @staticmethod
    def from_json(doc: dict) -> OpNode:
        doc = dict(doc)
        spec = doc.pop("spec")
        doc["dims"] = tuple(doc["dims"])
        return OpNode(spec=OpSpec.from_json(spec) if spec else None, **doc)


def transposed_conv(data: list[int], weight: list[int], strides: tuple[int, int],
                    padding: tuple[int, int, int, int], output_padding: tuple[int, int],
                    groups: int = 1, dilation: tuple[int, int] = (1, 1)) -> OpSpec | None:
    """The conv2d a (batch-1, NCHW, IOHW-weight) conv2d_transpose legalizes to: stride 1 over
    its input dilated by ``strides``, padded by ``K - 1 - pad`` (plus the output padding at the
    bottom and right), kernel flipped, which :mod:`codl_tvm.schedules.conv_transpose` runs on
    the project's conv kernels; None where it does not (groups or dilation other than 1)."""
    if groups != 1 or tuple(dilation) != (1, 1) or len(data) != 4:
        return None
    (_, ic, h, w), (_, oc, kh, kw) = data, weight
    (sh, sw), (top, left, bottom, right) = strides, padding
    pad = (kh - 1 - top, kw - 1 - left, kh - 1 - bottom + output_padding[0],
           kw - 1 - right + output_padding[1])
    if min(pad) < 0:  # a padding past the kernel crops: TOPI slices, not a plain conv
        return None
    if (h - 1) * sh + pad[0] + pad[2] < kh - 1 or (w - 1) * sw + pad[1] + pad[3] < kw - 1:
        return None  # an empty output: no op to price
    return OpSpec("conv2d", (h - 1) * sh + 1, (w - 1) * sw + 1, ic, oc, kh, kw, 1, 1, pad)


def transposed_spec(desc: dict) -> OpSpec | None:
    """:func:`transposed_conv` of a conv2d_transpose as :func:`codl_tvm.list_ops` describes
    it (NCHW data, IOHW weight)."""
    pad = tuple(desc["padding"])
    return transposed_conv(desc["in"], desc["weight"], tuple(desc["strides"]),
                           pad * 2 if len(pad) == 2 else pad, tuple(desc["output_padding"]),
                           desc["groups"], tuple(desc["dilation"]))


POOL_KINDS = {"max_pool2d": "pool_max", "avg_pool2d": "pool_avg"}


def desc_spec(desc: dict, weightless_matmul: bool = False) -> tuple[OpSpec | None, int]:
    """The predictor's :class:`OpSpec` of an op as :func:`codl_tvm.list_ops` describes it,
    and how often it repeats; (None, 1) where it has none.

    An OpSpec is batch-1, so a batch-N conv is N repeats of one image. A matmul ``[.., M, K] x
    [K, N]`` is a dense layer when M is 1, else a 1x1 convolution over M rows (what the H split
    cuts), repeated over leading batch dims. A matmul of two activations (attention) has no
    spec unless ``weightless_matmul`` prices it as one of a weight of its shape, as ``explain``
    does; a conv2d_transpose is the conv over its dilated input (:func:`transposed_spec`).
    """
    kind, shape_in, shape_out = desc["kind"], desc["in"], desc["out"]
    if kind == "matmul":
        if not weightless_matmul and (len(desc.get("weight", [])) != 2 or len(shape_in) < 2):
            return None, 1
        k, n = shape_in[-1], shape_out[-1]
        rows = shape_out[-2] if len(shape_out) >= 2 else 1
        repeat = math.prod(shape_out[:-2]) if len(shape_out) > 2 else 1
        if rows == 1:
            return OpSpec("dense", 1, 1, k, n), repeat
        return OpSpec("conv2d", rows, 1, k, n), repeat
    if kind == "conv2d_transpose":
        nchw = (desc.get("data_layout", "NCHW"), desc.get("kernel_layout", "IOHW")) == (
            "NCHW", "IOHW")
        return (transposed_spec(desc) if nchw else None), shape_in[0]
    batch, channels, height, width = shape_in
    common = {"H": height, "W": width, "SH": desc["strides"][0], "SW": desc["strides"][1],
              "pad": tuple(desc["padding"]), "dilation": desc["dilation"][0]}
    if kind in POOL_KINDS:
        kh, kw = desc["pool_size"]
        return OpSpec(POOL_KINDS[kind], IC=channels, OC=channels, KH=kh, KW=kw, **common), batch
    oc, _, kh, kw = desc["weight"]
    groups = desc["groups"]
    return OpSpec(conv_kind(channels, oc, groups), IC=channels, OC=oc, KH=kh, KW=kw,
                  groups=groups, **common), batch


def footprint_bytes(nodes: list[OpNode]) -> int:
    """Bytes a model touches per inference: every op's weights and output."""
    return sum(n.weight_bytes + n.out_bytes for n in nodes)
