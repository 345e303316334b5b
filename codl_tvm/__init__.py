"""codl-tvm: concurrent CPU+GPU execution of one DNN inference on Apache TVM (Relax).

Typical use::

    import codl_tvm
    mod = codl_tvm.load_model("model.onnx")
    pair = codl_tvm.DevicePair.preset("auto")
    plan = codl_tvm.Plan.uniform(mod, dim="H", ratio=0.7, chain=True)
    exe = codl_tvm.compile(mod, pair, plan)
    outputs = exe.run({"input": x})
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__version__ = "0.1.0"

# public name -> submodule; loaded on first use, so `codl-tvm --help` and the runtime-only
# runner do not pay for TVM's compiler (the "codl" pipeline is registered when TVM loads,
# through the package's tvm.backends entry point, or when codl_tvm.pipeline is imported)
_LAZY = {
    "DevicePair": "device", "Executable": "executable", "compile": "executable",
    "ModelError": "frontend", "load_model": "frontend", "list_ops": "graph",
    "from_torch": "frontend_torch", "KernelVariants": "tiling",
    "BindKernelTargets": "passes", "CoExecutionPartition": "passes", "FuseEpilogues": "passes",
    "CombineParallelDense": "passes", "IssueGpuWorkFirst": "passes",
    "PrepackWeights": "passes",
    "LiftDeviceConstants": "passes", "StageCrossDeviceCopies": "passes",
    "WriteSplitOutputsInPlace": "passes", "codl_pipeline": "pipeline", "Chain": "plan",
    "OpPlacement": "plan", "Plan": "plan", "PlanError": "plan",
}  # fmt: skip

# only TVM's runtime is loaded: codl_tvm.runtime works, the compiler side cannot import
__all__ = ["runtime"] if os.environ.get("TVM_USE_RUNTIME_LIB") == "1" else sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
