"""Models in: ONNX files or protos through TVM's Relax ONNX frontend, weights as constants."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import tvm
from tvm.relax.frontend.onnx import from_onnx

from .onnx_fold import fold_static_shapes
from .pipeline import prepare_passes

# module attribute: the ONNX graph's output names, in order (artifacts name outputs by them)
OUTPUT_NAMES_ATTR = "codl_output_names"


class ModelError(ValueError):
    """A model that cannot be loaded (unreadable file, dynamic shapes, ops TVM cannot import)."""


def load_model(
    model: str | os.PathLike | onnx.ModelProto | tvm.IRModule,
    shape: dict[str, list[int]] | None = None,
) -> tvm.IRModule:
    """Load a model as a Relax module ready for partitioning.

    Parameters
    ----------
    model : path, onnx.ModelProto or IRModule
        An ONNX file (static shapes), an in-memory ONNX model, or a Relax module.
    shape : dict, optional
        Input shape overrides by input name, e.g. ``{"input": [4, 3, 224, 224]}`` for batch 4.

    Returns
    -------
    IRModule
        ``main`` with the weights bound as constants, batch norms decomposed and constants
        folded, so op ids and plans are stable.
    """
    if isinstance(model, tvm.IRModule):
        mod = model
    else:
        proto = model if isinstance(model, onnx.ModelProto) else _read(Path(model))
        mod = _import(proto, shape)
    return tvm.transform.Sequential(prepare_passes())(mod)


def with_input_shapes(proto: onnx.ModelProto, shapes: dict[str, list[int]]) -> onnx.ModelProto:
    """A copy of ``proto`` whose graph inputs have the static ``shapes``."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for inp in out.graph.input:
        if inp.name in shapes:
            dims = inp.type.tensor_type.shape.dim
            del dims[:]
            for d in shapes[inp.name]:
                dims.add().dim_value = int(d)
    return out


def _read(path: Path) -> onnx.ModelProto:
    if not path.exists():
        raise ModelError(f"model file {path} does not exist")
    try:
        return onnx.load(str(path))
    except Exception as err:  # onnx raises several unrelated types for a bad file
        raise ModelError(f"{path} is not a readable ONNX model: {err}") from None


def _import(proto: onnx.ModelProto, shape: dict[str, list[int]] | None) -> tvm.IRModule:
    inits = {i.name for i in proto.graph.initializer}
    shapes: dict[str, list[int]] = {}
    for inp in proto.graph.input:
        if inp.name in inits:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in inp.type.tensor_type.shape.dim]
        if shape and inp.name in shape:
            dims = list(shape[inp.name])
        if any(d is None or d <= 0 for d in dims):
            raise ModelError(f"input {inp.name!r} has a dynamic shape {dims}; pass shape=...")
        shapes[inp.name] = dims
    unknown = set(shape or {}) - set(shapes)
    if unknown:
        raise ModelError(f"shape overrides name unknown inputs {sorted(unknown)}")
    proto = fold_static_shapes(with_input_shapes(proto, shapes))
    try:
        mod = from_onnx(proto, shape_dict=shapes, keep_params_in_input=False)
    except Exception as err:
        raise ModelError(f"TVM could not import the ONNX model: {err}") from None
    return mod.with_attr(OUTPUT_NAMES_ATTR, [o.name for o in proto.graph.output])
