"""The codl-tvm compile pipeline: one registered Relax pipeline of named phases.

``relax.get_pipeline("codl", pair=..., plan=...)`` returns it (registered on import of
``codl_tvm``); :func:`codl_tvm.compile` runs it and builds the VM executable.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax
from tvm.relax import transform as rt

from .device import DevicePair
from .passes import (
    BackTexturesWithBuffers,
    BindKernelTargets,
    CoExecutionPartition,
    CombineParallelDense,
    FuseEpilogues,
    IssueGpuWorkFirst,
    LiftDeviceConstants,
    LowerSlicesToBlockCopies,
    OverlapCopies,
    PrepackWeights,
    StageCrossDeviceCopies,
    WriteSplitOutputsInPlace,
)
from .passes import adreno_texture as tex
from .passes import texture_scope as scope
from .passes.cpu_fast_math import cpu_fast_math_legalizations
from .plan import Plan
from .schedules import ApplySchedules


def prepare_passes() -> list[tvm.transform.Pass]:
    """Make imported models partitionable: BN into mul/add, constant weights folded, dense
    layers that read one input combined into one matmul."""
    return [rt.DecomposeOpsForInference(), rt.CanonicalizeBindings(), rt.FoldConstant(),
            CombineParallelDense()]


def schedule_passes() -> list[tvm.transform.Pass]:
    """Kernel schedules: the project's own where they exist, DLight's rules otherwise (the
    fallback is :mod:`codl_tvm.schedules.dispatch`'s, per kernel); then the CPU kernels whose
    weight is a lifted constant read it packed at compile time."""
    return [ApplySchedules(), PrepackWeights()]


def lower_passes(staging: bool = False, cuda_graph: bool = False, overlap: bool = False,
                 block_copies: bool = False, block_in_kernels: bool = True
                 ) -> list[tvm.transform.Pass]:
    """TVM's default VM lowering minus StaticPlanBlockMemory; ``staging`` adds
    :class:`StageCrossDeviceCopies` (CPU<->GPU copies through buffers the runner makes once),
    ``overlap`` (with ``staging``) :class:`OverlapCopies` (kernels on a stream of their own,
    copies ordered by events), ``block_copies`` (with ``staging``)
    :class:`LowerSlicesToBlockCopies` (a split's row slices and concat as 2-D copies; with
    ``block_in_kernels`` the GPU part's kernels read and write their blocks of the whole
    tensors instead of copies within the GPU).

    TVM 0.27's static planner reuses one device's storage for another device's tensor in
    split-then-concat modules (apache/tvm#20207): a CPU kernel then writes into GPU memory.
    Without it every tensor is allocated on its own vdevice (from the VM's pooled allocator).

    ``cuda_graph`` (for a module whose every tensor is on one CUDA GPU: a GPU-only plan) plans
    memory statically and runs TVM's ``RewriteCUDAGraph``: the kernels between allocations are
    captured into a CUDA graph on the first run and replayed after, one launch for many.
    """
    graph = [rt.StaticPlanBlockMemory(), _rewrite_cuda_graph()] if cuda_graph else []
    return [
        rt.RewriteDataflowReshape(),
        rt.ToNonDataflow(),
        rt.RemovePurityChecking(),
        rt.CallTIRRewrite(),
        *graph,
        rt.LowerAllocTensor(),
        rt.KillAfterLastUse(),
        rt.LowerRuntimeBuiltin(),
        *([StageCrossDeviceCopies(), WriteSplitOutputsInPlace()] if staging else []),
        *([LowerSlicesToBlockCopies(block_in_kernels)] if staging and block_copies else []),
        *([OverlapCopies()] if staging and overlap else []),
        rt.ComputePrimValue(),
        rt.VMShapeLower(),
        rt.AttachGlobalSymbol(),
    ]


def _rewrite_cuda_graph() -> tvm.transform.Pass:
    """``RewriteCUDAGraph`` switched on (TVM reads ``relax.backend.use_cuda_graph`` from the
    pass context it runs in)."""

    @tvm.transform.module_pass(opt_level=0, name="codl.RewriteCUDAGraph")
    def _rewrite(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        with tvm.transform.PassContext(config={"relax.backend.use_cuda_graph": True}):
            return rt.RewriteCUDAGraph()(mod)

    return _rewrite


def _legalize_conv2d(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    # NCHW4c/OIHW4o convs (from UseAdrenoTexture) get Adreno's TOPI kernel, the rest TVM's
    if call.attrs.data_layout == "NCHW4c" and call.attrs.kernel_layout == "OIHW4o":
        from tvm.relax.transform.legalize_ops.adreno import conv2d_NCHWc_OIHWo

        return conv2d_NCHWc_OIHWo(bb, call)
    return tvm.ir.Op.get("relax.nn.conv2d").get_attr("FLegalize")(bb, call)


def texture_phases(
    base: list[tuple[str, list[tvm.transform.Pass]]], force: bool, fuse: bool = True,
    issue_gpu_first: bool | None = None,
) -> list[tuple[str, list[tvm.transform.Pass]]]:
    """``base`` with Adreno's texture path for the GPU's calls (see ``passes/adreno_texture``).

    TVM's Adreno pipeline (``relax.backend.adreno``) assumes one target; its pieces are used
    where they work on a two-device module: the NCHW4c conv legalization, the DLight Adreno
    rules (they skip non-Adreno kernels) and TIR's ``TextureFlatten``. That one runs here,
    after scheduling, rather than in the TIR pipeline: ``tvm.compile`` builds all kernels with
    one TIR pipeline, and 0.27's ``adreno`` TIR pipeline returns a bare pass where
    ``tirx.build`` unpacks three (it cannot be selected). ``TextureFlatten`` only touches
    texture-scoped buffers, so the CPU kernels are unchanged.
    """
    from tvm.s_tir import dlight as dl
    from tvm.s_tir.backend.adreno.transform import TextureFlatten

    from .schedules.texture_pool import TexturePool2D

    extra = {"partition": [tex.UseAdrenoTexture(force=force)]}
    out = []
    for name, passes in base:
        if name == "legalize":
            passes = [rt.LegalizeOps({"relax.nn.conv2d": _legalize_conv2d,
                                      **cpu_fast_math_legalizations()}),
                      *([FuseEpilogues()] if fuse else []), BindKernelTargets(),
                      *([IssueGpuWorkFirst()] if issue_gpu_first else [])]
        elif name == "schedule":
            # scopes after weight lifting: lifted weights stay on the GPU's global vdevice
            adreno = dl.ApplyDefaultSchedule(
                dl.adreno.Conv2d(), dl.adreno.LayoutTransform(), TexturePool2D())
            passes = [scope.AnnotateTextureScope(), adreno, scope.CheckTextureWriters(), *passes]
        elif name == "lower":
            at = next(i for i, p in enumerate(passes) if p.info.name == "CallTIRRewrite") + 1
            passes = [*passes[:at], scope.FoldTextureDeviceIndex(), *passes[at:]]
            # after the copies are staged: StageCrossDeviceCopies reads the tensors' devices
            at = next(i for i, p in enumerate(passes) if p.info.name == "ComputePrimValue")
            passes = [*passes[:at], BackTexturesWithBuffers(), *passes[at:],
                      TextureFlatten(), scope.TypeTextureStores]
        out.append((name, [*passes, *extra.get(name, [])]))
    return out


def issues_gpu_first(plan: Plan | None, issue_gpu_first: bool | None = None) -> bool:
    """Whether a build runs :class:`~codl_tvm.passes.IssueGpuWorkFirst`: as asked, else
    (None) where ``plan`` runs some op whole on the CPU beside GPU work."""
    if issue_gpu_first is None:
        return plan is not None and plan.runs_whole_ops_on_both()
    return bool(issue_gpu_first)


def phases(
    pair: DevicePair, plan: Plan, *, texture: bool | None = None, staging: bool = False,
    fuse: bool = True, cuda_graph: bool = False, overlap: bool | None = None,
    block_copies: bool = False, block_in_kernels: bool = True, cpu_chunks: int | None = None,
    issue_gpu_first: bool | None = None,
) -> list[tuple[str, list[tvm.transform.Pass]]]:
    """The pipeline as named phases, in order.

    ``fuse`` runs :class:`~codl_tvm.passes.FuseEpilogues` after ``LegalizeOps`` (elementwise
    ops inside the kernel before them); False leaves one kernel per op.

    ``cuda_graph`` captures the kernels into CUDA graphs (see :func:`lower_passes`) where the
    plan keeps everything on a CUDA GPU; other plans are built without (a split's CPU kernels
    and copies cannot be captured, and static memory planning is unsafe across devices).

    ``staging`` routes CPU<->GPU copies through staging parameters of ``main``
    (:class:`~codl_tvm.passes.StageCrossDeviceCopies`): :func:`codl_tvm.compile` sets it, as
    its runner allocates them; a caller that runs ``main`` itself leaves it off.

    ``overlap`` (default: where the GPU is CUDA) puts the kernels on a stream of their own so
    that a split's copies run beside them (:class:`~codl_tvm.passes.OverlapCopies`; with
    ``staging`` only). ``block_copies`` moves a split's row slices and concat with 2-D copies
    instead of kernels (:class:`~codl_tvm.passes.LowerSlicesToBlockCopies`; with ``staging``,
    on a CUDA GPU or the CPU pair; off by default); ``block_in_kernels`` (with it, the default)
    lets the GPU part's kernels read and write their blocks of the whole tensors.

    ``cpu_chunks`` (default :attr:`DevicePair.cpu_chunks`): most chunks the CPU's part of a
    row split runs in, each copied to the GPU while the next computes
    (:class:`~codl_tvm.passes.CoExecutionPartition`).

    ``issue_gpu_first`` issues the GPU's ready work before the host computes
    (:class:`~codl_tvm.passes.IssueGpuWorkFirst`); False keeps the model's binding order;
    None (default): where the plan runs some op whole on the CPU beside GPU work
    (:meth:`Plan.runs_whole_ops_on_both`). At 8 SMs of an H100 it took Inception-V3's plan
    with towers on the CPU from 11.34 to 7.96 ms, and made plans whose CPU work is all inside
    split ops 1-4% slower (each split op is already ordered so; hoisting another branch's
    kernels delays its GPU part): ``benchmarks/COEXEC.md``, "Parallel branches".

    ``texture`` (default: whether the pair's GPU target has the ``texture`` key, as the
    ``qcom/adreno-opencl-texture`` tag) adds Adreno's texture path; ``texture=True`` on another
    pair forces the NCHW4c layout rewrite on the GPU role alone (tests check its numbers).
    """
    issue_gpu_first = issues_gpu_first(plan, issue_gpu_first)
    base = [
        ("prepare", prepare_passes()),
        ("partition", [CoExecutionPartition(plan, pair, pair.cpu_chunks if cpu_chunks is None
                                            else cpu_chunks), rt.RealizeVDevice()]),
        ("legalize", [rt.LegalizeOps(cpu_fast_math_legalizations()),
                      *([FuseEpilogues()] if fuse else []),
                      BindKernelTargets(),
                      *([IssueGpuWorkFirst()] if issue_gpu_first else [])]),
        ("lift-cpu-weights", [LiftDeviceConstants()]),
        ("schedule", schedule_passes()),
        ("lower", lower_passes(staging, cuda_graph and graph_applies(pair, plan),
                               pair.overlaps_copies if overlap is None else overlap,
                               block_copies, block_in_kernels)),
    ]
    on_target = tex.is_texture_target(pair.gpu_target)
    if not (on_target if texture is None else texture):
        return base
    return texture_phases(base, force=not on_target, fuse=fuse, issue_gpu_first=issue_gpu_first)


def graph_applies(pair: DevicePair, plan: Plan) -> bool:
    """Whether CUDA graphs can run ``plan``: all of it on the pair's GPU, a CUDA one."""
    return plan.single_device() == "gpu" and pair.gpu_target.kind.name == "cuda"


def codl_pipeline(
    pair: DevicePair, plan: Plan | None = None, *, until: str | None = None,
    texture: bool | None = None, staging: bool = False, fuse: bool = True,
    cuda_graph: bool = False, overlap: bool | None = None, block_copies: bool = False,
    block_in_kernels: bool = True, cpu_chunks: int | None = None,
    issue_gpu_first: bool | None = None,
):
    """All phases up to and including ``until`` (all when None) as one Sequential.

    ``plan=None`` places the whole model on the pair's GPU. It is resolved against the module
    when the pipeline runs. ``texture``, ``staging``, ``fuse``, ``cuda_graph``, ``overlap``,
    ``block_copies``, ``block_in_kernels``, ``cpu_chunks``, ``issue_gpu_first``: see
    :func:`phases`.
    """

    @tvm.transform.module_pass(opt_level=0, name="CoDLPipeline")
    def _pipeline(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        the_plan = plan if plan is not None else Plan.single(
            tvm.transform.Sequential(prepare_passes())(mod), "gpu"
        )
        seq: list[tvm.transform.Pass] = []
        for name, passes in phases(pair, the_plan, texture=texture, staging=staging, fuse=fuse,
                                   cuda_graph=cuda_graph, overlap=overlap,
                                   block_copies=block_copies,
                                   block_in_kernels=block_in_kernels, cpu_chunks=cpu_chunks,
                                   issue_gpu_first=issue_gpu_first):
            seq.extend(passes)
            if name == until:
                break
        return tvm.transform.Sequential(seq, name=f"codl[{until or 'all'}]")(mod)

    return _pipeline


PIPELINE_NAME = "codl"


def codl(pair: Any = "auto", plan: Any = None, until: str | None = None) -> tvm.transform.Pass:
    """``relax.get_pipeline("codl", pair=..., plan=..., until=...)``: the pipeline from plain
    arguments, so a user of the TVM plugin needs no ``import codl_tvm``.

    Parameters
    ----------
    pair : DevicePair, str or dict
        A pair, a preset name (``"cpu-pair"``, ``"android-opencl"``...) or ``to_json`` output.
    plan : Plan, path or dict, optional
        A plan, a plan JSON file or its content; None runs everything on the GPU.
    until : str, optional
        Last phase to run (``prepare``, ``partition``, ``legalize``...).
    """
    if isinstance(pair, str):
        pair = DevicePair.parse(pair)
    elif isinstance(pair, dict):
        pair = DevicePair.from_json(pair)
    if isinstance(plan, dict):
        plan = Plan.from_json(plan)
    elif plan is not None and not isinstance(plan, Plan):
        plan = Plan.load(plan)
    return codl_pipeline(pair, plan, until=until)


# registered once, whichever comes first: this import, or the tvm.backends entry point
# (codl_tvm.deploy.plugin), whose factory imports this module when first called
relax.pipeline.PIPELINE_MAP.setdefault(PIPELINE_NAME, codl)
