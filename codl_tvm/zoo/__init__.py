"""codl_tvm.zoo: the models of the CoDL, muLayer and EOP papers as ONNX files.

Each model is built with ``onnx.helper`` from deterministic random weights, checked with
``onnx.checker`` (full check), cached as an ONNX file and meant to be loaded through the
path users take: :func:`codl_tvm.load_model` (TVM's ``from_onnx`` after codl-tvm's ONNX
folding).

Examples
--------
>>> from codl_tvm import zoo
>>> path = zoo.get("yolo-v2", input_shape=(64, 64))  # doctest: +SKIP
>>> mod = zoo.import_relax("tiny-cnn")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from .cache import cache_root, file_name, model_key, save_atomic
from .layers import GraphBuilder
from .registry import MODELS, SHAPE_MEANING, check_batch, resolve_config, resolve_shape, spec_of

__all__ = [
    "list_models", "info", "build", "get", "resolve", "load", "import_relax", "sample_inputs",
    "cache_root",
]


def list_models() -> list[str]:
    """Names of the zoo's models, in registry order."""
    return list(MODELS)


def _resolve(name: str, batch: int, input_shape, config: dict) -> tuple[tuple, dict]:
    spec_of(name)
    check_batch(batch)
    return resolve_shape(name, input_shape), resolve_config(name, config)


def build(
    name: str, *, batch: int = 1, input_shape=None, check: bool = True, **config: Any
) -> onnx.ModelProto:
    """Build a zoo model in memory.

    Parameters
    ----------
    name : str
        One of :func:`list_models`.
    batch : int
        Batch size (first dimension of every input).
    input_shape : tuple of int, optional
        Per-sample input shape override; see ``info(name)["input_shape_meaning"]``.
    check : bool
        Run ``onnx.checker.check_model(full_check=True)`` on the result.
    **config
        Model options (``info(name)["config"]`` lists them with their defaults), plus
        ``seed`` (weights) and ``fold_bn`` (fold batch norm into convs).

    Returns
    -------
    onnx.ModelProto
    """
    shape, cfg = _resolve(name, batch, input_shape, config)
    spec = spec_of(name)
    own = {k: v for k, v in cfg.items() if k not in ("seed", "fold_bn")}
    g = GraphBuilder(name, seed=int(cfg["seed"]), fold_bn=bool(cfg["fold_bn"]))
    if spec.kind == "image":
        x = g.input("input", (batch, *shape))
        g.output(spec.builder(g, x, **spec.fixed, **own), "output")
    else:
        spec.builder(g, batch, shape, **spec.fixed, **own)
    key = model_key(name, batch, shape, cfg)
    model = g.model({"codl_tvm.zoo": json.dumps(key, default=str), "paper": spec.paper})
    if check:
        onnx.checker.check_model(model, full_check=True)
    return model


def resolve(model: str | os.PathLike, *, batch: int = 1, input_shape=None) -> Path:
    """The ONNX file a command's MODEL names: an existing file, or a zoo model's cached file
    (built on first use with ``batch`` and ``input_shape``).

    Raises
    ------
    ValueError
        ``model`` is neither an existing file nor a zoo model name (the message lists both).
    """
    path = Path(model)
    if path.exists():
        return path
    if str(model) in list_models():
        return get(str(model), batch=batch, input_shape=tuple(input_shape) if input_shape else
                   None)
    raise ValueError(f"model {str(model)!r}: no such ONNX file, and not a zoo model "
                     f"(zoo: {', '.join(list_models())})")


def load(model: str | os.PathLike, *, batch: int | None = None, input_shape=None,
         shapes: dict[str, list[int]] | None = None):
    """The Relax module a command's MODEL names, ready for partitioning: the one model resolver
    of every command (``compile``, ``plan``, ``bench``, ``explain``).

    Parameters
    ----------
    model : path or str
        An ONNX file, or a zoo model name (:func:`list_models`; built on first use).
    batch : int, optional
        Batch size: a zoo model is built with it; an ONNX file's inputs get it as their first
        dimension.
    input_shape : sequence of int, optional
        A zoo model's per-sample input shape (ignored for an ONNX file).
    shapes : dict, optional
        Input shape overrides by input name (``{"input": [1, 3, 64, 64]}``), applied last.

    Raises
    ------
    codl_tvm.ModelError
        No such file or zoo model, a bad batch, or a model TVM cannot import.
    """
    from ..frontend import ModelError, load_model

    path = Path(model)
    if path.suffix == ".onnx" or path.exists():
        if batch is not None:
            shapes = {**_batch_shapes(path, batch), **(shapes or {})}
    else:
        try:
            path = resolve(model, batch=1 if batch is None else batch, input_shape=input_shape)
        except ValueError as err:
            raise ModelError(str(err)) from None
    return load_model(path, shape=shapes)


def _batch_shapes(path: Path, batch: int) -> dict[str, list[int]]:
    """Input shape overrides that set the first dimension of every input of an ONNX file."""
    from ..frontend import ModelError

    if batch < 1:
        raise ModelError(f"--batch must be at least 1, got {batch}")
    if not path.exists():
        raise ModelError(f"model file {path} does not exist")
    graph = onnx.load(str(path), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    return {inp.name: [batch, *(d.dim_value for d in inp.type.tensor_type.shape.dim[1:])]
            for inp in graph.input if inp.name not in inits}


def get(
    name: str, *, batch: int = 1, input_shape=None, cache_dir: str | os.PathLike | None = None,
    **config: Any,
) -> Path:  # fmt: skip
    """Path of the model's ONNX file in the cache, building and writing it on first use.

    The file name holds a digest of (name, batch, input shape, full config), so each
    variant has its own file. The cache folder is ``cache_dir``, else ``$CODL_TVM_CACHE/zoo``,
    else ``~/.cache/codl-tvm/zoo``. Other parameters as in :func:`build`.
    """
    shape, cfg = _resolve(name, batch, input_shape, config)
    path = cache_root(cache_dir) / file_name(model_key(name, batch, shape, cfg))
    if not path.exists():
        save_atomic(build(name, batch=batch, input_shape=shape, **config), path)
    return path


def import_relax(name: str, **kwargs: Any):
    """The Relax module of zoo model ``name`` (variant and cache folder as in :func:`get`),
    imported as a user's ONNX file is.

    Returns
    -------
    tvm.IRModule
        :func:`codl_tvm.load_model` of the cached file: weights as constants, the ONNX graph's
        static shape arithmetic folded, ready for partitioning.
    """
    from ..frontend import load_model  # the compiler side: building ONNX files needs no TVM

    return load_model(get(name, **kwargs))


def _inputs(name: str, batch: int, shape: tuple, cfg: dict) -> list[dict[str, Any]]:
    kind = spec_of(name).kind
    if kind == "tokens":
        (seq,) = shape
        return [
            {"name": "input_ids", "shape": [batch, seq], "dtype": "int64",
             "low": 0, "high": cfg["vocab_size"]},
            {"name": "attention_mask", "shape": [batch, seq], "dtype": "int64",
             "low": 0, "high": 2},
        ]  # fmt: skip
    return [{"name": "input", "shape": [batch, *shape], "dtype": "float32"}]


def info(name: str, *, batch: int = 1, input_shape=None, **config: Any) -> dict[str, Any]:
    """What a zoo model is: paper, inputs (name/shape/dtype, int range), config and notes."""
    shape, cfg = _resolve(name, batch, input_shape, config)
    spec = spec_of(name)
    return {
        "name": name,
        "paper": spec.paper,
        "kind": spec.kind,
        "inputs": _inputs(name, batch, shape, cfg),
        "input_shape": list(shape),
        "default_input_shape": list(spec.default_shape),
        "input_shape_meaning": SHAPE_MEANING[spec.kind],
        "config": cfg,
        "notes": spec.notes,
    }


def sample_inputs(
    name: str, *, batch: int = 1, input_shape=None, seed: int = 0, **config: Any
) -> dict[str, np.ndarray]:
    """Random inputs keyed by input name: N(0, 1) floats, ints within the valid range."""
    rng = np.random.default_rng(seed)
    out = {}
    for desc in info(name, batch=batch, input_shape=input_shape, **config)["inputs"]:
        if desc["dtype"] == "int64":
            out[desc["name"]] = rng.integers(desc["low"], desc["high"], desc["shape"])
        else:
            out[desc["name"]] = rng.standard_normal(desc["shape"]).astype(np.float32)
    return out
