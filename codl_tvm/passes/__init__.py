"""Relax passes of codl-tvm, one pass per file."""

from .adreno_texture import UseAdrenoTexture
from .bind_kernel_targets import BindKernelTargets
from .co_execution_partition import CoExecutionPartition
from .lift_device_constants import LiftDeviceConstants
from .texture_scope import AnnotateTextureScope

__all__ = [
    "AnnotateTextureScope", "BindKernelTargets", "CoExecutionPartition", "LiftDeviceConstants",
    "UseAdrenoTexture",
]
