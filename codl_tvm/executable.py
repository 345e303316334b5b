"""Compile a model for a device pair and run it: :func:`compile` and :class:`Executable`."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax

from . import runtime, streams
from .device import DevicePair, vdevice_index
from .frontend import OUTPUT_NAMES_ATTR
from .graph import entry_function
from .outputs import atomic_folder, write_json
from .passes.block_params import BLOCK_PARAMS_ATTR
from .passes.lift_device_constants import LIFTED_ATTR
from .passes.prepack_weights import PREPACK_PARAMS_ATTR
from .passes.stage_cross_device_copies import STAGING_ATTR
from .pipeline import codl_pipeline, issues_gpu_first
from .plan import Plan
from .tiling.gpu import use_gpu_sms
from .tiling.variants import OLD_ENV_SWITCHES, KernelVariants, use_variants


class Executable:
    """A co-executable model: the VM executable plus what is needed to feed it.

    Use :meth:`run`, :meth:`time` and :meth:`export`; the VM is created on first use, and
    the CPU weights are uploaded to the CPU once.
    """

    def __init__(
        self,
        vm_exec: Any,
        manifest: dict[str, Any],
        params: dict[str, np.ndarray],
        mod: tvm.IRModule | None = None,
    ):
        self.vm_exec, self.manifest, self.params = vm_exec, manifest, params
        self.mod = mod  # the lowered module, for inspection
        self._runner: runtime.Runner | None = None
        # what the runtime may run instead (compile's ``guard``; it runs the fastest): name -> an
        # executable written beside this one, or the path of an artifact relative to it
        self.alternatives: dict[str, Executable | str] = {}

    @property
    def runner(self) -> runtime.Runner:
        if self._runner is None:
            self._runner = runtime.Runner(self.vm_exec, self.manifest, self.params)
        return self._runner

    @property
    def input_names(self) -> list[str]:
        return [s["name"] for s in self.manifest["inputs"]]

    def run(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run once; returns the outputs in model order."""
        return self.runner.run(inputs)

    def time(self, inputs: dict[str, np.ndarray], repeat: int = 20, number: int = 1) -> float:
        """Median seconds of one inference (``time_evaluator``, one warm-up discarded)."""
        return self.runner.time(inputs, repeat=repeat, number=number)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Standard-normal inputs of the right names, shapes and dtypes."""
        return runtime.random_inputs(self.manifest, seed)

    def kernel_calls(self) -> int:
        """Kernel calls ``main`` makes per inference (a captured CUDA graph is one)."""
        calls = 0

        def visit(node: object) -> None:
            nonlocal calls
            if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.GlobalVar):
                calls += 1

        relax.analysis.post_order_visit(self.mod["main"].body, visit)
        return calls

    def export(
        self,
        path: str | os.PathLike,
        weights: bool = True,
        write_library: Callable[[Path], dict[str, Any]] | None = None,
        overwrite: bool = False,
        inputs: Iterable[str | os.PathLike] = (),
    ) -> Path:
        """Write the artifact folder (``lib.so``, ``params.npz``, ``manifest.json``).

        Everything is written into a temporary sibling folder first and renamed into place,
        so a failed export leaves nothing behind. An existing folder is replaced only when it
        is a codl-tvm artifact and ``overwrite`` is set; the working directory, folders above
        it and folders holding one of ``inputs`` are refused (:mod:`codl_tvm.outputs`).
        ``weights=False`` leaves ``params.npz`` out and marks the manifest so the runtime draws
        random weights of the right shapes: for timing big models on a machine the weights
        cannot travel to. ``write_library(folder)``
        replaces the default ``lib.so`` writer (cross-compilation: see
        :func:`codl_tvm.deploy.cross.export_for_device`) and returns manifest entries to add.
        :attr:`alternatives` go into ``alternatives/NAME`` (or are referred to by their path)
        and the manifest lists them: :func:`codl_tvm.runtime.load` runs the fastest.
        """
        with atomic_folder(path, inputs, overwrite) as tmp:
            manifest = dict(self.manifest)
            if write_library is None:
                self.vm_exec.export_library(str(tmp / runtime.LIBRARY))
            else:
                manifest.update(write_library(tmp))
            if weights:
                np.savez(tmp / runtime.PARAMS, **self.params)
            else:
                manifest["weights"] = "random"
            if self.alternatives:
                manifest["alternatives"] = []
            for name, alt in self.alternatives.items():
                where = alt if isinstance(alt, str) else f"alternatives/{name}"
                if not isinstance(alt, str):
                    alt.export(tmp / where, weights, write_library)
                manifest["alternatives"].append({"name": name, "dir": where})
            write_json(tmp / runtime.MANIFEST, manifest)
        return Path(path)


def compile(  # noqa: A001 - mirrors tvm.compile
    mod: tvm.IRModule, pair: DevicePair, plan: Plan | None = None, *, staging: bool = True,
    variants: KernelVariants | None = None, fuse: bool = True, cuda_graph: bool = False,
    overlap: bool | None = None, block_copies: bool | None = None,
    block_in_kernels: bool = True, guard: bool = False, cpu_chunks: int | None = None,
    issue_gpu_first: bool | None = None,
) -> Executable:
    """Partition ``mod`` by ``plan`` on ``pair`` and build it.

    Parameters
    ----------
    mod : IRModule
        A Relax module with a ``main`` function (e.g. from :func:`codl_tvm.load_model`).
    pair : DevicePair
        The CPU and GPU to run on.
    plan : Plan, optional
        Where each op runs; None runs the whole model on the pair's GPU.
    staging : bool
        Copy tensors between the devices through staging buffers made once per loaded model
        (pinned on CUDA; :class:`~codl_tvm.passes.StageCrossDeviceCopies`). False keeps TVM's
        ``to_device``, which allocates each copy's destination on every run.
    variants : KernelVariants, optional
        Which kernel variants to build (:class:`codl_tvm.tiling.KernelVariants`: the GPU conv's
        tile table, the CPU 1x1 GEMM's reach, GPU Winograd on/off); None: the defaults (or
        those of an enclosing ``tiling.use_variants``). Recorded in the manifest
        (``kernel_variants``). The environment switches that did this before are not read.
    fuse : bool
        Run elementwise ops inside the kernel before them (:class:`~codl_tvm.passes.FuseEpilogues`).
    cuda_graph : bool
        Capture GPU-only plans on a CUDA GPU into CUDA graphs.
    overlap : bool, optional
        Run kernels on a stream of their own so that a split's copies overlap them
        (:class:`~codl_tvm.passes.OverlapCopies`); None: where the GPU is CUDA. Needs
        ``staging``. Recorded in the manifest (``overlap``).
    block_copies : bool, optional
        Move a split's row slices and its concat with 2-D copies instead of kernels
        (:class:`~codl_tvm.passes.LowerSlicesToBlockCopies`; CUDA GPUs and the CPU pair).
        None: where the GPU is CUDA (:attr:`DevicePair.runs_block_copies`; measured at 8 SMs
        of an H200, ``benchmarks/COEXEC.md``). Needs ``staging``. Recorded in the manifest
        (``block_copies``).
    block_in_kernels : bool
        With ``block_copies``: the GPU part's kernel reads its rows from the whole input and
        writes them into the whole output, where it is one kernel at each end (no copy
        within the GPU; :func:`~codl_tvm.passes.block_params.on_whole_tensors`). False keeps
        copies within the GPU (to compare). Recorded in the manifest
        (``kernels_on_whole_tensors``: how many kernels do).
    cpu_chunks : int, optional
        Most chunks the CPU's part of a row split runs in, each chunk's rows copied to the
        GPU while the next one computes; None: :attr:`DevicePair.cpu_chunks` (2 where copies
        overlap kernels, else 1). Recorded in the manifest (``cpu_chunks``).
    issue_gpu_first : bool, optional
        Issue the GPU's kernels and copies that are ready before the host computes on the
        CPU (:class:`~codl_tvm.passes.IssueGpuWorkFirst`), so parallel branches on the two
        processors run at once. None: where ``plan`` runs some op whole on the CPU beside
        GPU work (:meth:`Plan.runs_whole_ops_on_both`); False keeps the model's order.
        Recorded in the manifest (``issue_gpu_first``).
    guard : bool
        Where ``plan`` uses both processors, also build the model on each processor alone,
        and each of ``plan.candidates`` (:attr:`Executable.alternatives`,
        :func:`guard_plans`): the runtime times them all where it loads the artifact and
        runs the fastest, so the plan never runs slower than a single processor of the
        machine at hand, and a candidate planned for other processor speeds runs where
        those are the machine's (a predictor fitted on another machine can misjudge its
        speeds). Loading then takes a few runs of each.
    """
    if plan is not None:
        plan.validate(mod)
    options = {"staging": staging, "variants": variants, "fuse": fuse, "cuda_graph": cuda_graph,
               "overlap": overlap, "issue_gpu_first": issue_gpu_first}  # the guard's builds share
    if block_copies is None:
        block_copies = pair.runs_block_copies
    if block_copies and not (pair.runs_block_copies or pair.is_cpu_only):
        raise ValueError(f"block_copies needs a CUDA GPU (or the cpu-pair); the GPU of pair "
                         f"{pair.name!r} is {pair.gpu_spec['kind']}")
    _warn_old_switches()
    issue = issues_gpu_first(plan, issue_gpu_first)
    with use_variants(variants) as used, use_gpu_sms(pair.gpu_sms):
        lowered = codl_pipeline(pair, plan, staging=staging, fuse=fuse,
                                cuda_graph=cuda_graph, overlap=overlap,
                                block_copies=block_copies,
                                block_in_kernels=block_in_kernels,
                                cpu_chunks=cpu_chunks, issue_gpu_first=issue)(mod)
        lowered, params, manifest = artifact_parts(mod, lowered, pair, plan, used)
        vm_exec = tvm.compile(lowered, target=None, relax_pipeline=None)
    manifest["fused"] = bool(fuse)
    manifest["overlap"] = calls_extern(lowered, streams.BEGIN)
    manifest["block_copies"] = calls_extern(lowered, streams.COPY_BLOCK)
    manifest["cpu_chunks"] = pair.cpu_chunks if cpu_chunks is None else cpu_chunks
    manifest["issue_gpu_first"] = issue
    manifest["kernels_on_whole_tensors"] = sum(
        1 for f in lowered.functions.values() if isinstance(f, tvm.tirx.PrimFunc)
        and f.attrs is not None and BLOCK_PARAMS_ATTR in f.attrs)
    # captured or not, as the lowering decided (a plan with a CPU op or a split is not)
    manifest["cuda_graph"] = any(gv.name_hint.endswith("cuda_graph_capture")
                                 for gv in lowered.functions)
    exe = Executable(vm_exec, manifest, params, lowered)
    if guard and plan is not None:
        split_options = {"block_copies": block_copies, "block_in_kernels": block_in_kernels,
                         "cpu_chunks": cpu_chunks}
        for name, alt in guard_plans(mod, plan).items():  # the same build options
            exe.alternatives[name] = compile(mod, pair, alt, **options, **(
                split_options if alt.single_device() is None else {}))
    return exe


def guard_plans(mod: tvm.IRModule, plan: Plan) -> dict[str, Plan]:
    """What a guarded build of ``plan`` holds beside it, by name: its candidates
    (``plan-LABEL``) and the model on each processor alone that the plan (or a candidate)
    does not already run; nothing where all of them keep to one processor."""
    plans = {f"plan-{label}": cand for label, cand in plan.candidates.items()}
    if all(p.single_device() is not None for p in (plan, *plans.values())):
        return {}
    for role in ("gpu", "cpu"):
        if plan.single_device() != role:
            plans[f"{role}-only"] = Plan.single(mod, role)
    return plans


def _warn_old_switches() -> None:
    """One warning per process naming the retired environment switches that are set."""
    set_now = sorted(k for k in OLD_ENV_SWITCHES if k in os.environ)
    if set_now and not _warned_switches.issuperset(set_now):
        _warned_switches.update(set_now)
        import warnings

        warnings.warn(
            f"{', '.join(set_now)} no longer change kernels and are ignored; pass "
            "codl_tvm.compile(..., variants=codl_tvm.tiling.KernelVariants("
            f"{', '.join(f'{OLD_ENV_SWITCHES[k]}=...' for k in set_now)}))",
            UserWarning, stacklevel=3,
        )


_warned_switches: set[str] = set()


def calls_extern(mod: tvm.IRModule, symbol: str) -> bool:
    """``main`` of ``mod`` calls the packed function ``symbol``."""
    found: list[bool] = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(True) if (
        isinstance(e, relax.Call) and isinstance(e.op, relax.ExternFunc)
        and e.op.global_symbol == symbol) else None)
    return bool(found)


def _module_attr(mod: tvm.IRModule, key: str, default: Any) -> Any:
    return mod.attrs[key] if mod.attrs and key in mod.attrs else default


def artifact_parts(
    mod: tvm.IRModule, lowered: tvm.IRModule, pair: DevicePair, plan: Plan | None,
    variants: KernelVariants | None = None,
) -> tuple[tvm.IRModule, dict[str, np.ndarray], dict[str, Any]]:
    """What the pipeline's output makes of an artifact: the module to build (the pipeline's
    attributes taken off), the weights to store, and the manifest."""
    lifted = dict(_module_attr(lowered, LIFTED_ATTR, {}))
    staging = list(_module_attr(lowered, STAGING_ATTR, []))
    prepack = _module_attr(lowered, PREPACK_PARAMS_ATTR, None)
    lowered = (lowered.without_attr(LIFTED_ATTR).without_attr(STAGING_ATTR)
               .without_attr(PREPACK_PARAMS_ATTR))
    params = {name: value.numpy() for name, value in lifted.items()}
    taken = {*lifted, *(prepack["outputs"] if prepack else ())}  # main's weights
    main_params = [p.name for p in entry_function(lowered).params if p.name in taken]
    manifest = make_manifest(mod, lowered, pair, plan, main_params, staging, variants)
    if prepack:
        manifest["prepack"] = prepack_manifest(lowered, prepack)
    return lowered, params, manifest


def prepack_manifest(lowered: tvm.IRModule, prepack: Any) -> dict[str, Any]:
    """The manifest's ``prepack``: the function that packs the CPU kernels' weights, the
    weights it reads (``params.npz`` holds them) and the parameters of ``main`` it makes
    (:class:`codl_tvm.passes.PrepackWeights`)."""
    func = lowered[lowered.get_global_var(str(prepack["function"]))]
    vdevices = list(lowered.global_infos["vdevice"])
    return {"function": str(prepack["function"]),
            "sources": [{"name": v.name, "shape": [int(d) for d in v.ty.shape],
                         "dtype": str(v.ty.dtype),
                         "role": ("gpu", "cpu")[vdevice_index(vdevices, v.ty.vdevice) or 0]}
                        for v in func.params],
            "outputs": [str(n) for n in prepack["outputs"]]}


def make_manifest(
    source: tvm.IRModule, lowered: tvm.IRModule, pair: DevicePair, plan: Plan | None,
    lifted: list[str], staging: list[str] = (), variants: KernelVariants | None = None,
) -> dict[str, Any]:
    """Inputs (name, shape, dtype, device role), CPU params, staging buffers, devices, pair,
    TVM version, plan, the kernel variants built (``kernel_variants``; None: the defaults) and
    the model's output names."""
    vdevices = list(lowered.global_infos["vdevice"])
    names = source.attrs.get(OUTPUT_NAMES_ATTR) if source.attrs else None
    params = list(entry_function(lowered).params)
    n_inputs = len(params) - len(lifted) - len(staging)
    n_params = n_inputs + len(lifted)
    roles = ("gpu", "cpu")

    def spec(var: relax.Var) -> dict[str, Any]:
        ty = var.ty
        index = vdevice_index(vdevices, ty.vdevice) or 0
        return {"name": var.name, "shape": [int(d) for d in ty.shape], "dtype": str(ty.dtype),
                "role": roles[index]}

    return {
        "format": runtime.ARTIFACT_FORMAT,
        "version": runtime.ARTIFACT_VERSION,
        "tvm_version": tvm.__version__,
        "pair": pair.to_json(),
        "devices": [[pair.runtime_kind(r), pair.runtime_index(r)] for r in roles],
        "inputs": [spec(v) for v in params[:n_inputs]],
        "params": [spec(v) for v in params[n_inputs:n_params]],
        "staging": [spec(v) for v in params[n_params:]],
        "plan": plan.to_json() if plan is not None else None,
        "kernel_variants": (variants or KernelVariants()).to_json(),
    } | ({"outputs": [str(n) for n in names]} if names else {})
