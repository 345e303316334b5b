"""The operator graph of a Relax model: partitionable ops, their specs, and the data flow.

Nodes are the anchors of :func:`codl_tvm.graph.find_anchors` (conv2d, matmul, pooling with
their epilogues), in binding order. An edge ``u -> v`` means u's output reaches one of v's
inputs through non-partitionable ops only (add, concat, reshape, ...), so residual adds and
inception concats show up as joins (in-degree > 1) and shared inputs as branches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx
import tvm
from tvm import relax

from ..graph import AnchorOp, count_uses, entry_function, find_anchors, fingerprint
from ..passes.fuse_epilogues import fusable_kernels
from ..predictor.opspec import OpSpec
from ..split_rules import RULES
from ..unit_geometry import split_extent
from .glue import GlueOp, is_elementwise, priced_shape
from .nodes import BYTES_PER_ELEM, OpNode, desc_spec


@dataclass
class ModelGraph:
    """The planner's view of one model.

    Attributes
    ----------
    nodes : list of OpNode
        Partitionable ops in data-flow order.
    graph : networkx.DiGraph
        Same ops as nodes (attribute ``op``: the OpNode), edges along the data flow.
    fingerprint : str
        The model fingerprint plans carry.
    glue : list of GlueOp
        The ops outside the plan that run a kernel, in binding order (:mod:`.glue`).
    """

    nodes: list[OpNode]
    graph: nx.DiGraph
    fingerprint: str
    glue: list[GlueOp] = field(default_factory=list)

    @property
    def by_id(self) -> dict[str, OpNode]:
        return {n.op_id: n for n in self.nodes}

    def to_json(self) -> dict:
        return {"fingerprint": self.fingerprint, "nodes": [n.to_json() for n in self.nodes],
                "glue": [g.to_json() for g in self.glue]}

    @staticmethod
    def from_json(doc: dict) -> ModelGraph:
        nodes = [OpNode.from_json(d) for d in doc["nodes"]]
        glue = [GlueOp.from_json(g) for g in doc.get("glue", [])]
        return ModelGraph(nodes, digraph(nodes), doc["fingerprint"], glue)


def op_spec(anchor: AnchorOp) -> tuple[OpSpec | None, int]:
    """Predictor spec of an anchor and its batch repeat (:func:`~.nodes.desc_spec`); (None,
    1) when it has none, as a matmul of two activations."""
    return desc_spec(anchor.describe())


def _var_args(expr: relax.Expr) -> list[relax.Var]:
    if isinstance(expr, relax.Var):
        return [expr]
    if isinstance(expr, relax.Tuple):
        return [v for f in expr.fields for v in _var_args(f)]
    if isinstance(expr, relax.TupleGetItem):
        return _var_args(expr.tuple_value)
    if isinstance(expr, relax.Call):
        return [v for a in expr.args for v in _var_args(a)]
    return []


def _producers(func: relax.Function, anchors: list[AnchorOp]) -> dict[str, list[str]]:
    """For each anchor, the anchors whose outputs reach its inputs through other ops only."""
    owner = {b.var: a.op_id for a in anchors for b in a.bindings}
    heads = {a.bindings[0].var: a for a in anchors}
    deps: dict[relax.Var, frozenset[str]] = {}
    preds: dict[str, list[str]] = {}
    for block in func.body.blocks:
        for b in block.bindings:
            if b.var in heads:
                srcs = set().union(*(deps.get(v, frozenset()) for v in _var_args(b.value)))
                preds[owner[b.var]] = sorted(srcs, key=lambda s: order_key(s, anchors))
            if b.var in owner:
                deps[b.var] = frozenset({owner[b.var]})
            else:
                deps[b.var] = frozenset().union(*(deps.get(v, frozenset())
                                                  for v in _var_args(b.value)))
    return preds


def order_key(op_id: str, anchors: list[AnchorOp]) -> int:
    return next(i for i, a in enumerate(anchors) if a.op_id == op_id)


def _chain_next(a: AnchorOp, nxt: AnchorOp | None) -> dict[str, bool]:
    follows = nxt is not None and nxt.data.same_as(a.out_var) and a.out_uses == 1
    # the planner prices a conv2d_transpose as the conv over its dilated input, whose rows
    # are not its producer's: it may head a row chain, not continue one
    return {"H": bool(follows and split_extent(nxt, "H") > 0 and nxt.kind != "conv2d_transpose"),
            "OC": bool(follows and RULES[nxt.kind].channel_local(nxt.call))}


def build_graph(mod: tvm.IRModule) -> ModelGraph:
    """The :class:`ModelGraph` of ``mod`` (a module from :func:`codl_tvm.load_model`)."""
    func = entry_function(mod)
    anchors = find_anchors(func)
    preds = _producers(func, anchors)
    input_ids: dict[relax.Var, int] = {}
    nodes: list[OpNode] = []
    for i, a in enumerate(anchors):
        spec, repeat = op_spec(a)
        dims = tuple(d for d in ("H", "OC") if spec is not None and split_extent(a, d) > 1)
        if spec is not None and spec.kind == "dense":
            dims = tuple(d for d in dims if d == "OC")
        weight = a.describe().get("weight")
        nodes.append(OpNode(
            op_id=a.op_id, kind=a.kind, spec=spec, order=i, in_shape=a.in_shape,
            out_shape=a.out_shape,
            weight_bytes=math.prod(weight) * BYTES_PER_ELEM if weight else 0,
            dims=dims, preds=preds.get(a.op_id, []),
            chain_next=_chain_next(a, anchors[i + 1] if i + 1 < len(anchors) else None),
            input_key=input_ids.setdefault(a.data, len(input_ids)), repeat=repeat,
        ))  # fmt: skip
    glue = _glue(func, anchors, fusable_kernels(mod))
    return ModelGraph(nodes, digraph(nodes), fingerprint(anchors), glue)


def _shape(expr: relax.Expr) -> list[int] | None:
    ty = getattr(expr, "ty", None)
    shape = getattr(ty, "shape", None)
    if not isinstance(ty, relax.TensorType) or shape is None:
        return None
    try:
        return [int(d) for d in shape]
    except TypeError:  # a symbolic dim
        return None


def _glue(func: relax.Function, anchors: list[AnchorOp], fusable: set[str]) -> list[GlueOp]:
    """The ops outside the anchors that run a kernel, each with the anchor its first input
    comes from (where the partition pass runs it) and the kernel it fuses into.

    ``fusable``: the names of the importer's kernels (``call_tir``) that are elementwise.
    :class:`codl_tvm.passes.FuseEpilogues` joins an elementwise op with the producer of each
    input that nobody else reads, where that producer is elementwise or takes an epilogue (a
    conv, conv2d_transpose or matmul anchor; one such per kernel). Each group is one kernel.
    """
    owner = {b.var: a.op_id for a in anchors for b in a.bindings}
    heads = {a.out_var: a.op_id for a in anchors
             if a.kind in ("conv2d", "conv2d_transpose", "matmul")}
    uses = count_uses(func)
    groups = _Groups()
    found: list[tuple[relax.Var, str, tuple[int, ...], str | None]] = []
    source: dict[relax.Var, str | None] = {}
    for block in func.body.blocks:
        for b in block.bindings:
            args = _var_args(b.value)
            src = owner.get(b.var) or (source.get(args[0]) if args else None)
            source[b.var] = src
            value = b.value
            if b.var in owner or not (isinstance(value, relax.Call)
                                      and isinstance(value.op, tvm.ir.Op)):
                continue
            out_shape = _shape(b.var)
            if out_shape is None:
                continue
            data = next((a for a in value.args if _shape(a) is not None), None)
            shape = priced_shape(value.op.name, out_shape, None if data is None else _shape(data))
            if shape is None:
                continue
            found.append((b.var, value.op.name, tuple(shape), src))
            if not _elementwise(value, fusable):
                continue
            groups.add(b.var)
            for a in args:
                if uses.get(a, 0) == 1 and (a in heads or a in groups):
                    groups.join(b.var, a, heads.get(a))
    out = []
    seen: set[object] = set()
    for var, op, shape, src in found:
        into = None
        if var in groups:
            root, head = groups.head(var)
            # the first op of a group without a head carries the group's kernel
            into = "" if root in seen or head == "" else head
            seen.add(root)
        out.append(GlueOp(op, shape, src, into))
    return out


class _Groups:
    """Union-find of elementwise glue ops; a group has at most one head (the anchor or
    epilogue-taking op its kernel is)."""

    def __init__(self) -> None:
        self.parent: dict[object, object] = {}
        self.heads: dict[object, str] = {}  # root -> head id ("" for a glue op's own kernel)

    def __contains__(self, x: object) -> bool:
        return x in self.parent

    def add(self, x: object) -> None:
        self.parent.setdefault(x, x)

    def find(self, x: object) -> object:
        while self.parent[x] is not x:
            x = self.parent[x]
        return x

    def join(self, x: object, producer: object, head: str | None) -> None:
        """Fuse ``x`` with ``producer``: an elementwise op, or a head when ``head`` is set."""
        rx = self.find(x)
        if head is not None:
            if rx not in self.heads:
                self.heads[rx] = head
            return
        rp = self.find(producer)
        if rp is rx or (rx in self.heads and rp in self.heads):
            return
        self.parent[rx] = rp
        if rx in self.heads:
            self.heads[rp] = self.heads.pop(rx)

    def head(self, x: object) -> tuple[object, str | None]:
        root = self.find(x)
        return root, self.heads.get(root)


def _elementwise(call: relax.Call, fusable: set[str]) -> bool:
    if call.op.name == "relax.call_tir":
        return isinstance(call.args[0], tvm.ir.GlobalVar) and call.args[0].name_hint in fusable
    return is_elementwise(call.op.name)


def digraph(nodes: list[OpNode]) -> nx.DiGraph:
    """networkx view: nodes in data-flow order with attribute ``op``, edges from ``preds``."""
    g = nx.DiGraph()
    for n in nodes:
        g.add_node(n.op_id, op=n, kind=n.kind, order=n.order, flops=n.flops,
                   in_shape=n.in_shape, out_shape=n.out_shape)
    for n in nodes:
        for p in n.preds:
            g.add_edge(p, n.op_id)
    return g
