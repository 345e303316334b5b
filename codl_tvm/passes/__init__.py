"""Relax passes of codl-tvm, one pass per file."""

from .adreno_texture import UseAdrenoTexture
from .back_textures_with_buffers import BackTexturesWithBuffers
from .bind_kernel_targets import BindKernelTargets
from .co_execution_partition import CoExecutionPartition
from .combine_parallel_dense import CombineParallelDense
from .fuse_epilogues import FuseEpilogues
from .issue_gpu_work_first import IssueGpuWorkFirst
from .lift_device_constants import LiftDeviceConstants
from .lower_slices_to_block_copies import LowerSlicesToBlockCopies
from .overlap_copies import OverlapCopies
from .prepack_weights import PrepackWeights
from .stage_cross_device_copies import StageCrossDeviceCopies
from .texture_scope import AnnotateTextureScope
from .write_split_outputs_in_place import WriteSplitOutputsInPlace

__all__ = [
    "AnnotateTextureScope", "BackTexturesWithBuffers", "BindKernelTargets",
    "CoExecutionPartition", "CombineParallelDense", "FuseEpilogues", "IssueGpuWorkFirst",
    "LiftDeviceConstants",
    "LowerSlicesToBlockCopies", "OverlapCopies", "PrepackWeights", "StageCrossDeviceCopies",
    "UseAdrenoTexture", "WriteSplitOutputsInPlace",
]
