"""Partitionable operators of a Relax function, with stable ids and their epilogues.

An *anchor* is a conv2d, conv2d_transpose, matmul or 2-D pooling call. Its id is
``{kind}_{k}``: the k-th anchor of that kind in binding order of the entry function, so the
same model always gives the same ids. Its *epilogue* is the run of elementwise bindings right
after it (bias add, BN scale and shift, ReLU...) that use only the previous value and
constants: they are computed per part, so a split operator carries its bias and activation
with it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import tvm
from tvm import relax

# op name -> short kind used in ids and plans
ANCHOR_KINDS: dict[str, str] = {
    "relax.nn.conv2d": "conv2d",
    "relax.nn.conv2d_transpose": "conv2d_transpose",
    "relax.matmul": "matmul",
    "relax.nn.max_pool2d": "max_pool2d",
    "relax.nn.avg_pool2d": "avg_pool2d",
}

# elementwise ops that may follow an anchor inside its part (unary, or binary with a constant)
EPILOGUE_OPS: frozenset[str] = frozenset(
    {
        "relax.add",
        "relax.subtract",
        "relax.multiply",
        "relax.divide",
        "relax.maximum",
        "relax.minimum",
        "relax.nn.relu",
        "relax.nn.leakyrelu",
        "relax.nn.gelu",
        "relax.nn.silu",
        "relax.sigmoid",
        "relax.tanh",
        "relax.clip",
    }
)


@dataclass
class AnchorOp:
    """One partitionable operator and the bindings that make up its unit."""

    op_id: str
    kind: str
    bindings: list[relax.VarBinding] = field(default_factory=list)
    out_uses: int = 0  # readers of out_var; a chain may only continue through a single reader

    @property
    def call(self) -> relax.Call:
        return self.bindings[0].value

    @property
    def data(self) -> relax.Expr:
        return self.call.args[0]

    @property
    def out_var(self) -> relax.Var:
        """The value the rest of the graph sees: the last epilogue binding's var."""
        return self.bindings[-1].var

    @property
    def in_shape(self) -> list[int]:
        return [int(d) for d in self.data.ty.shape]

    @property
    def out_shape(self) -> list[int]:
        return [int(d) for d in self.bindings[0].var.ty.shape]

    def describe(self) -> dict:
        attrs = self.call.attrs
        doc: dict = {"id": self.op_id, "kind": self.kind, "in": self.in_shape}
        doc["out"] = self.out_shape
        if len(self.call.args) > 1:
            doc["weight"] = [int(d) for d in self.call.args[1].ty.shape]
        for key in ("strides", "padding", "output_padding", "dilation", "groups", "pool_size",
                    "ceil_mode"):
            value = getattr(attrs, key, None) if attrs is not None else None
            if value is not None:
                doc[key] = [int(v) for v in value] if hasattr(value, "__len__") else int(value)
        for key in ("data_layout", "kernel_layout"):  # the spec of an op assumes NCHW
            value = getattr(attrs, key, None) if attrs is not None else None
            if value is not None:
                doc[key] = str(value)
        doc["epilogue"] = [b.value.op.name for b in self.bindings[1:]]
        return doc


def _is_const_like(expr: relax.Expr) -> bool:
    return isinstance(expr, tvm.ir.Constant)


def count_uses(func: relax.Function) -> dict[relax.Var, int]:
    """How many times each var of ``func`` is read."""
    uses: dict[relax.Var, int] = {}

    def visit(node: object) -> None:
        if isinstance(node, relax.Var):
            uses[node] = uses.get(node, 0) + 1

    relax.analysis.post_order_visit(func.body, visit)
    return uses


def _bindings(func: relax.Function) -> list[relax.VarBinding]:
    return [b for block in func.body.blocks for b in block.bindings]


def _is_epilogue_of(binding: relax.Binding, prev: relax.Var) -> bool:
    value = binding.value
    if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
        return False
    if value.op.name not in EPILOGUE_OPS or not value.args or len(value.args) > 2:
        return False
    others = [a for a in value.args if not a.same_as(prev)]
    return len(others) == len(value.args) - 1 and all(_is_const_like(a) for a in others)


def find_anchors(func: relax.Function) -> list[AnchorOp]:
    """Anchors of ``func`` in binding order, each with its epilogue bindings."""
    uses = count_uses(func)
    bindings = _bindings(func)
    counts: dict[str, int] = {}
    anchors: list[AnchorOp] = []
    i = 0
    while i < len(bindings):
        b = bindings[i]
        value = b.value
        kind = None
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            kind = ANCHOR_KINDS.get(value.op.name)
        if kind is None or not _static_tensor(b.var):
            i += 1
            continue
        op = AnchorOp(f"{kind}_{counts.get(kind, 0)}", kind, [b])
        counts[kind] = counts.get(kind, 0) + 1
        i += 1
        # an epilogue binding must consume the previous value, which nobody else may read
        while i < len(bindings) and uses.get(op.out_var, 0) == 1:
            if not _is_epilogue_of(bindings[i], op.out_var):
                break
            op.bindings.append(bindings[i])
            i += 1
        op.out_uses = uses.get(op.out_var, 0)
        anchors.append(op)
    return anchors


def _static_tensor(var: relax.Var) -> bool:
    ty = var.ty
    shape = getattr(ty, "shape", None)
    return shape is not None and all(isinstance(d, tvm.tirx.IntImm) for d in shape)


def fingerprint(anchors: list[AnchorOp]) -> str:
    """Hash of every anchor's kind, shapes and attributes: a plan is bound to one model."""
    doc = [{k: v for k, v in a.describe().items() if k != "epilogue"} for a in anchors]
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def entry_function(mod: tvm.IRModule) -> relax.Function:
    """The module's ``main`` (ONNX imports and our builders both name it so)."""
    for gv, func in mod.functions.items():
        if gv.name_hint == "main" and isinstance(func, relax.Function):
            return func
    raise ValueError("the module has no Relax function named 'main'")


def list_ops(mod: tvm.IRModule) -> list[dict]:
    """Descriptions of the partitionable ops of ``mod`` (id, kind, shapes, attributes)."""
    return [a.describe() for a in find_anchors(entry_function(mod))]
