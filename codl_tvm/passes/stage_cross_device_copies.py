"""StageCrossDeviceCopies: every CPU<->GPU copy moves between buffers made once, not per run.

TVM lowers ``R.to_vdevice`` to ``vm.builtin.to_device``, which allocates a fresh destination
on every run (``cudaMalloc`` with a ``cudaMemGetInfo`` on CUDA) and, on the host side, uses
pageable memory that the driver stages through its own pinned bounce buffer (3-4x slower than
a pinned copy). This pass, run on the lowered VM code (after ``LowerRuntimeBuiltin``),
rewrites each copy between the two devices of ``main``:

- GPU -> CPU: the copy lands in a *staging parameter* (a CPU tensor appended to ``main``'s
  parameters), which the CPU sub-op then reads;
- CPU -> GPU: the CPU kernel that produces the tensor writes straight into a staging
  parameter, which is copied into a GPU tensor of the VM's pooled allocator (reused across
  runs, no ``cudaMalloc`` after the first).

Copies use TVM's own ``runtime.TVMTensorCopyFromTo``, which issues ``cudaMemcpyAsync`` and does
not wait: into pinned memory a GPU -> CPU copy is still in flight when it returns, and the CPU
kernel after it would read what the buffer held before. Each such copy is therefore followed by
a *sync*: ``vm.builtin.to_device`` of a one-element view of the copy's source to the CPU, which
copies 4 bytes and synchronizes the GPU's stream (TVM 0.27's VM has no bare sync builtin). A
CPU -> GPU copy needs none: the GPU kernels that read it are queued behind it on the same stream.
``main`` also starts with one sync, so that no CPU kernel of a run writes a staging buffer that
the previous run's last upload may still be reading. The runner (:mod:`codl_tvm.runtime`)
allocates the staging tensors once per loaded model: in pinned host memory where the GPU is
CUDA, so each copy runs at the DMA floor; plain host memory elsewhere (an OpenCL runtime with
mapped buffers would allocate them there). The staging parameters' names are kept in the
module attribute ``codl.staging_params``, in parameter order. A copy whose result ``main``
returns, or whose CPU source is not a kernel output, is left to ``vm.builtin.to_device``.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import GenericConst
from tvm.relax.op import vm as vm_op

from ..device import ROLES, vdevice_index

STAGING_ATTR = "codl.staging_params"
TO_DEVICE = "vm.builtin.to_device"
COPY = "runtime.TVMTensorCopyFromTo"
VIEW = "runtime.TVMTensorCreateView"
# the VM-level ops and calls both post-lowering passes match (WriteSplitOutputsInPlace too)
ALLOC_TENSOR = tvm.ir.Op.get("relax.vm.alloc_tensor")
KILL = tvm.ir.Op.get("relax.vm.kill_object")


def is_op(value: relax.Expr, op: tvm.ir.Op) -> bool:
    return isinstance(value, relax.Call) and value.op.same_as(op)


def is_extern(value: relax.Expr, symbol: str) -> bool:
    """``value`` calls the packed function ``symbol``."""
    return (isinstance(value, relax.Call) and isinstance(value.op, relax.ExternFunc)
            and value.op.global_symbol == symbol)


RESHAPE = "vm.builtin.reshape"  # a view of its argument (a flatten before a dense layer)


def tensor_role(var: relax.Expr, defs: dict, vdevices: list) -> int | None:
    """The vdevice index (role) of a tensor of lowered VM code: from its type, else from what
    defines it (an alias, a pooled allocation, a view or reshape of another tensor)."""
    ty = getattr(var, "ty", None)
    if isinstance(ty, relax.TensorType) and ty.vdevice is not None:
        return vdevice_index(vdevices, ty.vdevice)
    value = defs.get(var)
    if isinstance(value, relax.Var):
        return tensor_role(value, defs, vdevices)
    if is_op(value, ALLOC_TENSOR):
        return int(value.args[4].value)
    if is_extern(value, VIEW) or is_extern(value, RESHAPE):
        return tensor_role(value.args[0], defs, vdevices)
    return None


def bindings_of(func: relax.Function) -> tuple[list[relax.Binding], dict, dict]:
    """``main``'s bindings in order, each var's value, and each var's users (the bindings
    that pass it to a call): what the passes over the lowered VM code walk."""
    bindings = [b for block in func.body.blocks for b in block.bindings]
    uses: dict[relax.Var, list[relax.Binding]] = {}
    for b in bindings:
        if isinstance(b.value, relax.Call):
            for a in b.value.args:
                if isinstance(a, relax.Var):
                    uses.setdefault(a, []).append(b)
    return bindings, {b.var: b.value for b in bindings}, uses


def own_storage(var: relax.Var, defs: dict, uses: dict) -> list[relax.Var]:
    """The storage var of ``var``'s pooled allocation and the storage's kills, when ``var``
    is the only tensor made in it (else empty): what goes with ``var``'s allocation."""
    storage = defs[var].args[0]
    users = uses.get(storage, [])
    if all(u.var.same_as(var) or is_op(u.value, KILL) for u in users):
        return [storage] + [u.var for u in users if is_op(u.value, KILL)]
    return []


def with_main(mod: tvm.IRModule, bindings: list[relax.Binding],
              new_params: list[relax.Var] | None = None) -> tvm.IRModule:
    """``mod`` with ``main``'s body made of ``bindings`` (and ``new_params`` appended to its
    parameters), normalized so new calls get their types."""
    gv = mod.get_global_var("main")
    func = mod[gv]
    body = relax.SeqExpr([relax.BindingBlock(bindings)], func.body.body)
    mod = mod.clone()
    mod[gv] = relax.Function(list(func.params) + list(new_params or []), body, func.ret_ty,
                             func.is_pure, func.attrs)
    return relax.transform.Normalize()(mod)


def tensor_bytes(shape: list[int], dtype: str) -> int:
    nbytes = tvm.DataType(dtype).bits // 8
    for d in shape:
        nbytes *= int(d)
    return nbytes


def _is_to_device(value: relax.Expr) -> bool:
    return is_extern(value, TO_DEVICE) and value.args[3].value == "global"


def _returned(body: relax.Expr) -> set[relax.Var]:
    out = body.fields if isinstance(body, relax.Tuple) else [body]
    return {v for v in out if isinstance(v, relax.Var)}


def _copy(src: relax.Expr, dst: relax.Expr) -> relax.VarBinding:
    call = relax.Call(relax.ExternFunc(COPY), [src, dst], ty_args=[relax.TupleType([])])
    return relax.VarBinding(relax.Var("_", relax.TupleType([])), call)


def _sync(gpu_tensor: relax.Expr, to_cpu: relax.Call) -> list[relax.VarBinding]:
    """Wait for the GPU's stream: ``to_cpu`` (a ``vm.builtin.to_device`` to the CPU) applied
    to a one-element view of ``gpu_tensor``; TVM's ``to_device`` synchronizes after copying."""
    dtype = str(gpu_tensor.ty.dtype)
    one = relax.ShapeExpr([1])
    view = relax.Var("codl_sync_view", relax.TensorType(one, dtype))
    args = [gpu_tensor, one, GenericConst(tvm.DataType(dtype), relax.AnyType()),
            relax.prim_value(0)]
    out = relax.Var("codl_sync", relax.TensorType(one, dtype))
    return [
        relax.VarBinding(view, relax.Call(relax.ExternFunc(VIEW), args,
                                          ty_args=[relax.TensorType(one, dtype)])),
        relax.VarBinding(out, relax.Call(to_cpu.op, [view, *to_cpu.args[1:]], to_cpu.attrs,
                                         [relax.TensorType(one, dtype)])),
    ]


class _Stager:
    """Rewrites the bindings of one lowered ``main``; ``params`` are the new staging vars."""

    def __init__(self, vdevices: list, cpu_index: int, func: relax.Function):
        self.vdevices, self.cpu = vdevices, cpu_index
        self.params: list[relax.Var] = []
        self.bindings = [b for block in func.body.blocks for b in block.bindings]
        self.defs = {b.var: b.value for b in self.bindings}
        self.keep = _returned(func.body.body)
        self.drop: set[relax.Var] = set()  # vars whose allocation and kill calls go
        self.alias: dict[relax.Var, relax.Var] = {}  # kernel output -> staging param
        # an upload's result: the pooled allocation has no vdevice in its type, so later
        # uses read a new var of that type (a typed var cannot be bound to it)
        self.rename: dict[relax.Var, relax.Var] = {}

    def _stage(self, shape: relax.Expr, dtype: str) -> relax.Var:
        ty = relax.TensorType(shape, dtype, self.vdevices[self.cpu])
        var = relax.Var(f"codl_stage{len(self.params)}", ty)
        self.params.append(var)
        return var

    def plan(self) -> None:
        """Choose the copies to stage (fills ``alias`` and ``drop``)."""
        for b in self.bindings:
            if not _is_to_device(b.value) or b.var in self.keep:
                continue
            dst = vdevice_index(self.vdevices, b.value.attrs.dst_vdevice)
            src = b.value.args[0]
            if dst == self.cpu:
                self.alias[b.var] = self._stage(b.var.ty.shape, str(b.var.ty.dtype))
            elif dst is not None and self._cpu_kernel_output(src):
                alloc = self.defs[src]
                self.alias[src] = self._stage(alloc.args[2], str(alloc.args[3].value))
                self.drop.add(alloc.args[0])

    def _cpu_kernel_output(self, var: relax.Expr) -> bool:
        alloc = self.defs.get(var)
        return (var not in self.keep and is_op(alloc, ALLOC_TENSOR)
                and int(alloc.args[4].value) == self.cpu and var not in self.alias)

    def rewrite(self, params: list[relax.Var]) -> list[relax.Binding]:
        out = self._start_sync(params)
        for b in self.bindings:
            value = self._renamed(b.value)
            if b.var in self.drop or (is_op(value, KILL) and (
                    value.args[0] in self.drop or value.args[0] in self.alias)):
                continue
            if b.var in self.alias and _is_to_device(value):  # GPU -> CPU
                out += [_copy(value.args[0], self.alias[b.var]),
                        *_sync(value.args[0], value),
                        relax.VarBinding(b.var, self.alias[b.var])]
            elif b.var in self.alias:  # a CPU kernel's output: the staging buffer
                out.append(relax.VarBinding(b.var, self.alias[b.var]))
            elif _is_to_device(value) and value.args[0] in self.alias:  # CPU -> GPU
                out += self._upload(b.var, value)
            else:
                out.append(b if value.same_as(b.value) else relax.VarBinding(b.var, value))
        return out

    def _start_sync(self, params: list[relax.Var]) -> list[relax.Binding]:
        """A sync on a GPU parameter of ``main``, where it has one and copies to the CPU."""
        to_cpu = next((self.defs[v] for v in self.alias if v in self.defs
                       and _is_to_device(self.defs[v])), None)
        gpu = next((p for p in params if isinstance(p.ty, relax.TensorType)
                    and vdevice_index(self.vdevices, p.ty.vdevice) not in (None, self.cpu)), None)
        return [] if to_cpu is None or gpu is None else _sync(gpu, to_cpu)

    def _renamed(self, value: relax.Expr) -> relax.Expr:
        if not self.rename or not isinstance(value, relax.Call):
            return value
        args = [self.rename.get(a, a) if isinstance(a, relax.Var) else a for a in value.args]
        return relax.Call(value.op, args, value.attrs, value.ty_args)

    def _upload(self, old: relax.Var, call: relax.Call) -> list[relax.Binding]:
        dev = vdevice_index(self.vdevices, call.attrs.dst_vdevice)
        ty = old.ty
        var = self.rename[old] = relax.Var(old.name, relax.TensorType(ty.shape, ty.dtype))
        nbytes = tensor_bytes(ty.shape.values, str(ty.dtype))
        storage = relax.Var("codl_upload_storage", relax.ObjectType())
        return [
            relax.VarBinding(storage, vm_op.alloc_storage(
                relax.ShapeExpr([nbytes]), dev, "uint8", "global")),
            relax.VarBinding(var, vm_op.alloc_tensor(storage, 0, ty.shape, str(ty.dtype), dev)),
            relax.VarBinding(relax.Var("_", relax.TupleType([])), vm_op.kill_object(storage)),
            _copy(call.args[0], var),
        ]


@tvm.transform.module_pass(opt_level=0, name="StageCrossDeviceCopies")
class StageCrossDeviceCopies:
    """Copy CPU<->GPU tensors through staging parameters of ``main`` (see the module doc)."""

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if "vdevice" not in mod.global_infos or len(mod.global_infos["vdevice"]) < 2:
            return mod
        vdevices = list(mod.global_infos["vdevice"])
        gv = mod.get_global_var("main")
        func = mod[gv]
        if not isinstance(func.body, relax.SeqExpr):
            return mod
        stager = _Stager(vdevices, ROLES.index("cpu"), func)
        stager.plan()
        if not stager.params:
            return mod
        body = relax.SeqExpr([relax.BindingBlock(stager.rewrite(list(func.params)))],
                             func.body.body)
        new_func = relax.Function(list(func.params) + stager.params, body, func.ret_ty,
                                  func.is_pure, func.attrs)
        mod = mod.clone()
        mod[gv] = new_func
        # new calls get their types from the normalizer
        mod = relax.transform.Normalize()(mod)
        return mod.with_attr(STAGING_ATTR, [p.name for p in stager.params])
