"""The TVM plugin entry point: ``tvm.relax.get_pipeline("codl", ...)`` without importing codl_tvm.

``pyproject.toml`` declares::

    [project.entry-points."tvm.backends"]
    codl = "codl_tvm.deploy.plugin:_autoload"

TVM 0.27 calls every ``tvm.backends`` entry point with no arguments at the end of
``import tvm`` (``tvm/backend/_autoload_backends.py``), after ``tvm.relax`` is imported in a full
TVM and also in a runtime-only process; a failure there is only a warning. So :func:`_autoload`
does nothing with only the runtime, and otherwise registers the ``"codl"`` pipeline as a thin
factory (:func:`codl`) that imports :func:`codl_tvm.pipeline.codl` when first called (it builds
the pipeline from plain arguments: a preset name, a plan file), so users need no
``import codl_tvm``. Importing this module imports
the ``codl_tvm`` package (Python imports parents first), which costs little on top of TVM.
``TVM_DEVICE_BACKEND_AUTOLOAD=0`` switches all such plugins off.
"""

from __future__ import annotations

import os
from typing import Any

PIPELINE_NAME = "codl"  # codl_tvm.pipeline.PIPELINE_NAME (not imported: see _autoload)


def codl(pair: Any = "auto", plan: Any = None, until: str | None = None) -> Any:
    """The registered factory: :func:`codl_tvm.pipeline.codl`, imported when first called."""
    from codl_tvm.pipeline import codl as factory

    return factory(pair, plan, until)


def _autoload() -> None:
    """Register the ``"codl"`` Relax pipeline (called by ``import tvm``)."""
    if os.environ.get("TVM_USE_RUNTIME_LIB") == "1":
        return
    from tvm.base import _RUNTIME_ONLY

    if _RUNTIME_ONLY:
        return
    from tvm.relax import pipeline

    # No codl_tvm module may be imported here: TVM calls this from inside ``import tvm``, which
    # may itself run inside a codl_tvm module's import (codl_tvm.device imports tvm), and that
    # module would be seen half-initialised. codl_tvm.pipeline registers its factory on import
    # (setdefault), so whichever comes first registers it; both build the same pipeline.
    pipeline.PIPELINE_MAP.setdefault(PIPELINE_NAME, codl)
