"""Where zoo models are stored: cache folder, file key, atomic writes."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import onnx

# Bump when a builder changes what it writes, so stale cached files are not reused.
ZOO_FORMAT = 1
ENV_VAR = "CODL_TVM_CACHE"


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir`` if given, else $CODL_TVM_CACHE/zoo, else ~/.cache/codl-tvm/zoo."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get(ENV_VAR)
    return Path(env) / "zoo" if env else Path.home() / ".cache" / "codl-tvm" / "zoo"


def model_key(name: str, batch: int, shape: tuple[int, ...], config: dict[str, Any]) -> dict:
    return {"name": name, "batch": batch, "input_shape": list(shape), "config": config,
            "format": ZOO_FORMAT}  # fmt: skip


def file_name(key: dict) -> str:
    """Readable prefix + digest of the whole key (config included)."""
    blob = json.dumps(key, sort_keys=True, default=str).encode()
    digest = hashlib.sha256(blob).hexdigest()[:12]
    shape = "x".join(str(d) for d in key["input_shape"])
    return f"{key['name']}_b{key['batch']}_{shape}_{digest}.onnx"


def save_atomic(model: onnx.ModelProto, path: Path) -> Path:
    """Write to a temp file in the same folder, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    os.close(fd)
    try:
        onnx.save_model(model, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
