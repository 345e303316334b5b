"""Partition plans: a versioned JSON document saying where each operator runs.

Example::

    {
      "format": "codl-tvm-plan", "version": 1,
      "model": {"fingerprint": "3f1c...", "num_ops": 12},
      "io_device": "gpu",
      "ops": {
        "conv2d_0": {"place": "split", "dim": "H", "ratio": 0.7},
        "conv2d_1": {"place": "gpu"},
        "max_pool2d_0": {"place": "split", "dim": "H", "ratio": 0.7}
      },
      "chains": [{"ops": ["conv2d_0", "max_pool2d_0"], "dim": "H", "ratio": 0.7}],
      "candidates": {"cpu-x1.25": {"format": "codl-tvm-plan", ...}},
      "notes": ["memory cap: 2 H split(s) (conv2d_3, conv2d_4) made OC splits ..."]
    }

``ratio`` is the GPU's share of the split dimension (rounded to whole rows/channels). Ops the
plan does not name run on the GPU. A chain is a run of consecutive ops that share one split, so
data crosses devices only at the chain's ends (CoDL section 4.2). ``candidates`` (optional)
are other plans of the same model, by label: ``compile(..., guard=True)`` builds each beside the
plan, and the runtime runs the fastest where it loads the artifact
(:mod:`codl_tvm.planner.candidates`). ``notes`` (optional) say why the planner changed the
plan it would otherwise have made; ``explain`` prints them.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm
import tvm_ffi

from .chains import consecutive_runs
from .graph import entry_function, find_anchors, fingerprint
from .outputs import write_json
from .unit_geometry import split_extent

FORMAT = "codl-tvm-plan"
CANDIDATE_LABEL = re.compile(r"[a-z0-9][a-z0-9.-]{0,31}")  # a folder name in an artifact
VERSION = 1
PLACES = ("cpu", "gpu", "split")
DIMS = ("H", "OC")
# which dims each op kind can be split on ("H" = output rows, "OC" = output channels/columns)
SPLIT_DIMS: dict[str, tuple[str, ...]] = {
    "conv2d": ("H", "OC"),
    "conv2d_transpose": ("H", "OC"),
    "matmul": ("H", "OC"),
    "max_pool2d": ("H", "OC"),
    "avg_pool2d": ("H", "OC"),
}


@tvm_ffi.register_error("PlanError")
class PlanError(ValueError):
    """A plan that does not fit its model or is malformed.

    Registered with TVM's FFI so it keeps its type when raised inside a pass.
    """


@dataclass
class OpPlacement:
    place: str = "gpu"
    dim: str | None = None
    ratio: float | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"place": self.place}
        if self.place == "split":
            doc.update(dim=self.dim, ratio=self.ratio)
        return doc


@dataclass
class Chain:
    ops: list[str]
    dim: str
    ratio: float

    def to_json(self) -> dict[str, Any]:
        return {"ops": list(self.ops), "dim": self.dim, "ratio": self.ratio}


@dataclass
class Plan:
    """Where each partitionable op of one model runs.

    Attributes
    ----------
    ops : dict[str, OpPlacement]
        Placement by op id (ids from :func:`codl_tvm.graph.list_ops`).
    chains : list[Chain]
        Runs of consecutive split ops sharing one dim and ratio.
    fingerprint : str or None
        Hash of the model's op shapes; a plan for another model is rejected.
    io_device : {"gpu", "cpu"}
        Device that holds the model's inputs and outputs.
    candidates : dict[str, Plan]
        Other plans of the model by label (lower-case letters, digits, ``.`` and ``-``), built
        beside this one by ``compile(..., guard=True)``; the runtime runs the fastest.
    notes : list of str
        Why the planner changed the plan it would otherwise have made (a memory cap, a
        single processor kept); not part of what the plan places.
    """

    ops: dict[str, OpPlacement] = field(default_factory=dict)
    chains: list[Chain] = field(default_factory=list)
    fingerprint: str | None = None
    num_ops: int | None = None
    io_device: str = "gpu"
    candidates: dict[str, Plan] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    # ---- constructors -------------------------------------------------------------------
    @classmethod
    def uniform(cls, mod: tvm.IRModule, dim: str, ratio: float, chain: bool = False) -> Plan:
        """Split every op that can be split on ``dim`` at ``ratio``.

        With ``chain=True``, maximal runs of consecutive ops (each feeding only the next)
        become chains.
        """
        anchors = find_anchors(entry_function(mod))
        _check_ratio("uniform", ratio)
        plan = cls(fingerprint=fingerprint(anchors), num_ops=len(anchors))
        for a in anchors:
            # an op with a single row (a batch-1 dense layer on H) has nothing to split
            if dim in SPLIT_DIMS[a.kind] and split_extent(a, dim) > 1:
                plan.ops[a.op_id] = OpPlacement("split", dim, float(ratio))
        if chain:
            # only ops this plan splits: an op left whole (one row) ends a chain
            for run in consecutive_runs(mod, dim, list(plan.ops)):
                if len(run) > 1:
                    plan.chains.append(Chain(run, dim, float(ratio)))
        return plan

    def single_device(self) -> str | None:
        """``"gpu"`` or ``"cpu"`` where every op, the inputs and the outputs are on that
        processor (ops the plan does not name run on the GPU); None for any other plan."""
        places = {p.place for p in self.ops.values()}
        if self.num_ops is None or len(self.ops) < self.num_ops:
            places.add("gpu")
        if self.chains or places != {self.io_device}:
            return None
        return self.io_device

    def runs_whole_ops_on_both(self) -> bool:
        """Whether some op runs whole on the CPU while others use the GPU: the plans whose
        CPU work can run beside GPU work issued ahead of it
        (:class:`~codl_tvm.passes.IssueGpuWorkFirst`), not only inside split ops."""
        return self.single_device() is None and any(
            p.place == "cpu" for p in self.ops.values())

    @classmethod
    def single(cls, mod: tvm.IRModule, place: str) -> Plan:
        """Every op on one processor (``"cpu"`` or ``"gpu"``), inputs and outputs there too."""
        if place not in ("cpu", "gpu"):
            raise PlanError(f"single-device plan needs 'cpu' or 'gpu', got {place!r}")
        anchors = find_anchors(entry_function(mod))
        plan = cls(fingerprint=fingerprint(anchors), num_ops=len(anchors), io_device=place)
        plan.ops = {a.op_id: OpPlacement(place) for a in anchors}
        return plan

    # ---- JSON ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "model": {"fingerprint": self.fingerprint, "num_ops": self.num_ops},
            "io_device": self.io_device,
            "ops": {k: v.to_json() for k, v in self.ops.items()},
            "chains": [c.to_json() for c in self.chains],
        } | ({"candidates": {k: c.to_json() for k, c in self.candidates.items()}}
             if self.candidates else {}) | ({"notes": list(self.notes)} if self.notes else {})

    @classmethod
    def from_json(cls, doc: Any, source: str = "plan") -> Plan:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise PlanError(f"{source}: not a codl-tvm plan (missing format {FORMAT!r})")
        if doc.get("version") != VERSION:
            raise PlanError(f"{source}: plan version {doc.get('version')!r}, expected {VERSION}")
        model = doc.get("model") or {}
        plan = cls(
            fingerprint=model.get("fingerprint"),
            num_ops=model.get("num_ops"),
            io_device=doc.get("io_device", "gpu"),
        )
        if plan.io_device not in ("cpu", "gpu"):
            raise PlanError(f"{source}: io_device must be 'cpu' or 'gpu'")
        for op_id, entry in (doc.get("ops") or {}).items():
            plan.ops[op_id] = _placement_from_json(op_id, entry, source)
        for i, entry in enumerate(doc.get("chains") or []):
            plan.chains.append(_chain_from_json(i, entry, source))
        plan.candidates = _candidates_from_json(doc.get("candidates"), source)
        notes = doc.get("notes", [])
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise PlanError(f"{source}: notes must be a list of strings")
        plan.notes = list(notes)
        return plan

    @classmethod
    def load(cls, path: str | os.PathLike) -> Plan:
        """Read a plan file; a malformed file raises :class:`PlanError` naming the problem."""
        try:
            doc = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise PlanError(f"plan file {path} does not exist") from None
        except json.JSONDecodeError as err:
            raise PlanError(f"plan file {path} is not valid JSON: {err}") from None
        return cls.from_json(doc, source=str(path))

    def save(self, path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = ()) -> None:
        """Write the plan atomically (a temp file renamed over ``path``); ``path`` may not be
        one of ``inputs`` (see :mod:`codl_tvm.outputs`)."""
        write_json(path, self.to_json(), inputs)

    # ---- queries ------------------------------------------------------------------------
    def placement(self, op_id: str) -> OpPlacement:
        return self.ops.get(op_id, OpPlacement("gpu"))

    def chain_of(self, op_id: str) -> Chain | None:
        for chain in self.chains:
            if op_id in chain.ops:
                return chain
        return None

    def validate(self, mod: tvm.IRModule) -> None:
        """Check the plan against ``mod``: same model, known ops, legal dims and chains."""
        anchors = find_anchors(entry_function(mod))
        kinds = {a.op_id: a.kind for a in anchors}
        if self.fingerprint is not None and self.fingerprint != fingerprint(anchors):
            raise PlanError(
                "plan was made for a different model (fingerprint "
                f"{self.fingerprint} != {fingerprint(anchors)}); make a new plan for this model"
            )
        for op_id, p in self.ops.items():
            if op_id not in kinds:
                raise PlanError(f"plan names unknown op {op_id!r}; the model has {sorted(kinds)}")
            if p.place == "split" and p.dim not in SPLIT_DIMS[kinds[op_id]]:
                raise PlanError(f"op {op_id} ({kinds[op_id]}) cannot be split on dim {p.dim!r}")
        seen: set[str] = set()
        for chain in self.chains:
            for op_id in chain.ops:
                if op_id not in kinds:
                    raise PlanError(f"chain names unknown op {op_id!r}")
                if op_id in seen:
                    raise PlanError(f"op {op_id} is in more than one chain")
                seen.add(op_id)
        for label, cand in self.candidates.items():
            try:
                cand.validate(mod)
            except PlanError as err:
                raise PlanError(f"candidate {label!r}: {err}") from None


def _check_ratio(op_id: str, ratio: Any) -> float:
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or math.isnan(ratio):
        raise PlanError(f"op {op_id}: ratio must be a number in [0, 1], got {ratio!r}")
    if not 0.0 <= ratio <= 1.0:
        raise PlanError(f"op {op_id}: ratio {ratio} is outside [0, 1]")
    return float(ratio)


def _placement_from_json(op_id: str, entry: Any, source: str) -> OpPlacement:
    if not isinstance(entry, dict) or entry.get("place") not in PLACES:
        raise PlanError(f"{source}: op {op_id}: 'place' must be one of {PLACES}")
    if entry["place"] != "split":
        return OpPlacement(entry["place"])
    if entry.get("dim") not in DIMS:
        raise PlanError(f"{source}: op {op_id}: split 'dim' must be one of {DIMS}")
    return OpPlacement("split", entry["dim"], _check_ratio(op_id, entry.get("ratio")))


def _chain_from_json(i: int, entry: Any, source: str) -> Chain:
    ops = entry.get("ops") if isinstance(entry, dict) else None
    if not isinstance(ops, list) or len(ops) < 2 or not all(isinstance(o, str) for o in ops):
        raise PlanError(f"{source}: chain {i}: 'ops' must list at least two op ids")
    if entry.get("dim") not in DIMS:
        raise PlanError(f"{source}: chain {i}: 'dim' must be one of {DIMS}")
    return Chain(list(ops), entry["dim"], _check_ratio(f"chain {i}", entry.get("ratio")))


def _candidates_from_json(doc: Any, source: str) -> dict[str, Plan]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise PlanError(f"{source}: candidates must be an object of label -> plan")
    out = {}
    for label, entry in doc.items():
        if not CANDIDATE_LABEL.fullmatch(str(label)):
            raise PlanError(f"{source}: candidate label {label!r} must be 1-32 lower-case "
                            "letters, digits, '.' or '-'")
        if isinstance(entry, dict) and entry.get("candidates"):
            raise PlanError(f"{source}: candidate {label!r} has candidates of its own")
        out[label] = Plan.from_json(entry, source=f"{source}, candidate {label!r}")
    return out
