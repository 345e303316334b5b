"""Sub-op and sharing kernels built directly: single-op Relax functions, legalized, scheduled.

Many jobs of one processor go into one module (one Relax function each) so one ``tvm.compile``
serves them all. Every tensor, weights included, is a function parameter: nothing is bound as a
constant, so exported libraries stay small and inputs are made on the device at run time. A
CPU kernel whose weight ``compile`` packs once (:class:`codl_tvm.passes.PrepackWeights`) takes
it packed here too, so the samples time the kernels the models run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import tvm
from tvm import relax
from tvm.relax import op as rop

from codl_tvm.device import DevicePair
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.profiler.blocking import Blocking, kernel_blocking
from codl_tvm.profiler.space import Job

TRANSFER_OPS = frozenset({"to_cpu", "to_gpu", "copy_gpu", "sync"})
COPY_BLOCKING = Blocking("copy", 0, 1, 1)


@dataclass(frozen=True)
class Entry:
    """One compiled function: its job, the blocking of its kernel and its input shapes."""

    name: str
    job: Job
    blocking: Blocking
    inputs: tuple[tuple[int, ...], ...]
    input_roles: tuple[str, ...]


def _tensor(shape: Sequence[int], vdev: relax.VDevice | None = None) -> relax.Var:
    return relax.Var("x", relax.TensorType(tuple(shape), "float32", vdev))


def _compute_expr(sub: OpSpec, params: list[relax.Var]) -> relax.Expr:
    x = params[0]
    if sub.kind in ("conv2d", "depthwise"):
        return rop.nn.conv2d(
            x, params[1], strides=(sub.SH, sub.SW), padding=sub.pad,
            dilation=(sub.dilation, sub.dilation), groups=sub.groups,
        )  # fmt: skip
    if sub.kind == "dense":
        return rop.matmul(x, params[1])
    if sub.kind in ("pool_max", "pool_avg"):
        pool = rop.nn.max_pool2d if sub.kind == "pool_max" else rop.nn.avg_pool2d
        return pool(x, (sub.KH, sub.KW), (sub.SH, sub.SW), sub.pad, (sub.dilation,) * 2)
    return rop.nn.relu(rop.add(x, params[1]))


def _compute_inputs(sub: OpSpec) -> list[tuple[int, ...]]:
    if sub.kind == "dense":
        return [(1, sub.IC), (sub.IC, sub.OC)]
    x = (1, sub.IC, sub.H, sub.W)
    if sub.kind in ("conv2d", "depthwise"):
        return [x, (sub.OC, sub.IC // sub.groups, sub.KH, sub.KW)]
    if sub.kind == "elementwise":
        return [x, (1, sub.IC, 1, 1)]
    return [x]


def _copy_inputs(job: Job) -> tuple[list[tuple[int, ...]], Any]:
    c, h, w = job.shape
    if job.op == "slice":
        return [(1, c, h + 1, w)], lambda p: rop.strided_slice(p[0], [2], [1], [h + 1])
    if job.op == "concat":
        if h >= 2:
            top = (h + 1) // 2
            shapes, axis = [(1, c, top, w), (1, c, h - top, w)], 2
        else:
            shapes, axis = [(1, c // 2 or 1, h, w), (1, c - (c // 2 or 1) or 1, h, w)], 1
        return shapes, lambda p: rop.concat(p, axis=axis)
    raise ValueError(f"not a copy job: {job.op}")


def _emit(bb: relax.BlockBuilder, name: str, shapes, expr_fn, vdev=None) -> None:
    params = [_tensor(s, vdev) for s in shapes]
    with bb.function(name, params):
        with bb.dataflow():
            out = bb.emit_output(expr_fn(params))
        bb.emit_func_output(out)


def _called_prim_funcs(func: relax.Function) -> list[tvm.ir.GlobalVar]:
    call_tir = tvm.ir.Op.get("relax.call_tir")
    out = []
    for block in func.body.blocks:
        for binding in block.bindings:
            val = binding.value
            if isinstance(val, relax.Call) and val.op == call_tir:
                out.append(val.args[0])
    return out


def _gpu_rules() -> list[Any]:
    from tvm.s_tir import dlight as dl

    return [
        ("matmul", dl.gpu.Matmul()),
        ("gemv", dl.gpu.GEMV()),
        ("reduction", dl.gpu.Reduction()),
        ("fallback", dl.gpu.Fallback()),
    ]


def _schedule(mod: tvm.IRModule, target: tvm.target.Target) -> tuple[tvm.IRModule, dict]:
    """Bind the target to every PrimFunc and schedule GPU ones; returns the rule per PrimFunc."""
    rules: dict[str, str] = {}
    is_gpu = target.kind.name != "llvm"
    for gv, func in list(mod.functions_items()):
        if isinstance(func, tvm.tirx.PrimFunc):
            mod[gv] = func.with_attr("target", target)
    try:  # the project's kernels first, DLight for what they leave unscheduled
        from codl_tvm.schedules import ApplySchedules
    except ImportError:
        pass
    else:  # weights packed as compile packs its constants: the kernel reads them packed
        from codl_tvm.passes import PrepackWeights

        mod = PrepackWeights(params=True)(ApplySchedules()(mod))
    with target:
        for gv, func in list(mod.functions_items()):
            if not isinstance(func, tvm.tirx.PrimFunc):
                continue
            rules[gv.name_hint] = "default"
            if func.attrs is not None and "tirx.is_scheduled" in func.attrs:
                rules[gv.name_hint] = "schedules"
                continue
            for name, rule in _gpu_rules() if is_gpu else []:
                sch = rule.apply(func, target, False)
                if sch is not None:
                    sch = sch[0] if isinstance(sch, list) else sch
                    mod[gv] = sch.mod["main"].with_attr("tirx.is_scheduled", True)
                    rules[gv.name_hint] = name
                    break
    for gv, func in list(mod.functions_items()):  # schedulers may rename it "main"
        if isinstance(func, tvm.tirx.PrimFunc):
            mod[gv] = func.with_attr("global_symbol", gv.name_hint)
    return mod, rules


def build_role_module(
    jobs: Sequence[Job], pair: DevicePair, role: str
) -> tuple[tvm.IRModule, list[Entry]]:
    """A scheduled module with one function per compute / slice / concat job of ``role``."""
    bb = relax.BlockBuilder()
    pending: list[tuple[str, Job, list, OpSpec | None]] = []
    for i, job in enumerate(jobs):
        name = f"{job.op}_{i}"
        if job.spec is not None:
            sub = job.sub
            shapes = _compute_inputs(sub)
            _emit(bb, name, shapes, lambda p, s=sub: _compute_expr(s, p))
        else:
            shapes, fn = _copy_inputs(job)
            sub = None
            _emit(bb, name, shapes, fn)
        pending.append((name, job, shapes, sub))
    mod = relax.transform.LegalizeOps()(bb.get())
    target = pair.target(role)
    mod, rules = _schedule(mod, target)
    spec = pair.gpu_spec if role == "gpu" else pair.cpu_spec
    entries = []
    for name, job, shapes, sub in pending:
        shapes = [tuple(int(d) for d in p.ty.shape) for p in mod[name].params]  # packed
        gvs = _called_prim_funcs(mod[name])
        if sub is None or not gvs:
            blocking = COPY_BLOCKING
        else:  # the kernel that writes the op's output decides the blocking
            gv = gvs[-1]
            blocking = kernel_blocking(mod[gv], sub.out_elems, spec, rules[gv.name_hint])
        entries.append(Entry(name, job, blocking, tuple(shapes), (role,) * len(shapes)))
    return mod, entries


def transfer_entries(jobs: Sequence[Job]) -> list[Entry]:
    """One staged copy per to_cpu / to_gpu / copy_gpu / sync job, timed without a compiled
    module.

    A split moves its tensors between buffers made once, one of them pinned where the GPU is
    CUDA (:mod:`codl_tvm.passes.stage_cross_device_copies`); the runner times exactly that
    copy and a sync (:func:`codl_tvm.profiler.rounds.time_copy`). ``sync`` copies one float
    from the GPU: the cost of a round trip that moves nothing. ``copy_gpu`` copies a block of
    rows out of a tensor one row taller within the GPU, as a split's row slice does with block
    copies (:func:`codl_tvm.streams.copy_block`).
    """
    entries = []
    for i, job in enumerate(jobs):
        src_role = "cpu" if job.op == "to_gpu" else "gpu"
        c, h, w = job.shape
        shape = (1, c, h, w)
        entries.append(Entry(f"{job.op}_{i}", job, COPY_BLOCKING, (shape,), (src_role,)))
    return entries


def compile_module(mod: tvm.IRModule, pair: DevicePair, role: str) -> Any:
    """``tvm.compile`` for one role's target."""
    target = pair.gpu_target if role == "gpu" else pair.cpu_target
    return tvm.compile(mod, target=target)


def with_cores(blocking: Blocking, cores: int) -> Blocking:
    """The blocking with the processor's core count measured at run time."""
    return replace(blocking, cores=cores)
