"""codl-tvm: concurrent CPU+GPU execution of one DNN inference on Apache TVM (Relax).

Typical use::

    import codl_tvm
    mod = codl_tvm.load_model("model.onnx")
    pair = codl_tvm.DevicePair.preset("auto")
    plan = codl_tvm.Plan.uniform(mod, dim="H", ratio=0.7, chain=True)
    exe = codl_tvm.compile(mod, pair, plan)
    outputs = exe.run({"input": x})
"""

import os

__version__ = "0.1.0"

if os.environ.get("TVM_USE_RUNTIME_LIB") == "1":
    # only TVM's runtime is loaded: codl_tvm.runtime works, the compiler side cannot import
    __all__ = ["runtime"]
else:
    from .device import DevicePair
    from .executable import Executable, compile
    from .frontend import ModelError, load_model
    from .graph import list_ops
    from .passes import BindKernelTargets, CoExecutionPartition, LiftDeviceConstants
    from .pipeline import codl_pipeline
    from .plan import Chain, OpPlacement, Plan, PlanError

    __all__ = [
        "BindKernelTargets",
        "Chain",
        "CoExecutionPartition",
        "DevicePair",
        "Executable",
        "LiftDeviceConstants",
        "ModelError",
        "OpPlacement",
        "Plan",
        "PlanError",
        "codl_pipeline",
        "compile",
        "list_ops",
        "load_model",
    ]
