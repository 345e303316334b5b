"""The codl-tvm compile pipeline: one registered Relax pipeline of named phases.

``relax.get_pipeline("codl", pair=..., plan=...)`` returns it (registered on import of
``codl_tvm``); :func:`codl_tvm.compile` runs it and builds the VM executable.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax import transform as rt

from .device import DevicePair
from .passes import BindKernelTargets, CoExecutionPartition, LiftDeviceConstants
from .plan import Plan


def prepare_passes() -> list[tvm.transform.Pass]:
    """Make imported models partitionable: BN into mul/add, constant weights folded."""
    return [rt.DecomposeOpsForInference(), rt.CanonicalizeBindings(), rt.FoldConstant()]


def schedule_pass() -> tvm.transform.Pass:
    """Kernel schedules: the project's own where they exist, DLight on the GPU otherwise."""
    try:
        from .schedules import ApplySchedules
    except ImportError:
        return default_gpu_schedule()
    return ApplySchedules()


def default_gpu_schedule() -> tvm.transform.Pass:
    from tvm.s_tir import dlight as dl

    # GPU rules skip llvm PrimFuncs, so the CPU kernels stay as legalized
    return dl.ApplyDefaultSchedule(
        dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
        dl.gpu.Fallback(),
    )


def lower_passes() -> list[tvm.transform.Pass]:
    """TVM's default VM lowering minus StaticPlanBlockMemory.

    TVM 0.27's static planner reuses one device's storage for another device's tensor in
    split-then-concat modules (apache/tvm#20207): a CPU kernel then writes into GPU memory.
    Without it every tensor is allocated on its own vdevice (from the VM's pooled allocator).
    """
    return [
        rt.RewriteDataflowReshape(),
        rt.ToNonDataflow(),
        rt.RemovePurityChecking(),
        rt.CallTIRRewrite(),
        rt.LowerAllocTensor(),
        rt.KillAfterLastUse(),
        rt.LowerRuntimeBuiltin(),
        rt.ComputePrimValue(),
        rt.VMShapeLower(),
        rt.AttachGlobalSymbol(),
    ]


def phases(pair: DevicePair, plan: Plan) -> list[tuple[str, list[tvm.transform.Pass]]]:
    """The pipeline as named phases, in order."""
    return [
        ("prepare", prepare_passes()),
        ("partition", [CoExecutionPartition(plan, pair), rt.RealizeVDevice()]),
        ("legalize", [rt.LegalizeOps(), BindKernelTargets()]),
        ("lift-cpu-weights", [LiftDeviceConstants()]),
        ("schedule", [schedule_pass()]),
        ("lower", lower_passes()),
    ]


def codl_pipeline(pair: DevicePair, plan: Plan | None = None, *, until: str | None = None):
    """All phases up to and including ``until`` (all when None) as one Sequential.

    ``plan=None`` places the whole model on the pair's GPU. It is resolved against the module
    when the pipeline runs.
    """

    @tvm.transform.module_pass(opt_level=0, name="CoDLPipeline")
    def _pipeline(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        the_plan = plan if plan is not None else Plan.single(
            tvm.transform.Sequential(prepare_passes())(mod), "gpu"
        )
        seq: list[tvm.transform.Pass] = []
        for name, passes in phases(pair, the_plan):
            seq.extend(passes)
            if name == until:
                break
        return tvm.transform.Sequential(seq, name=f"codl[{until or 'all'}]")(mod)

    return _pipeline


def _register() -> None:
    # the same factory the tvm.backends entry point registers: takes preset names, plan files
    from .deploy.plugin import PIPELINE_NAME, codl

    relax.pipeline.PIPELINE_MAP.setdefault(PIPELINE_NAME, codl)


_register()
