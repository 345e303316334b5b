"""CoExecutionPartition: split planned operators into a GPU sub-op and a CPU sub-op.

Each split unit (an op with its epilogue, or a chain of them) becomes, in this order::

    x_cpu = to_vdevice(strided_slice(x, cpu rows + halo), cpu)   # copies first: they sync
    y_gpu = op_gpu(strided_slice(x, gpu rows + halo))            # launch returns at once
    y_cpu = op_cpu(x_cpu)                                        # runs while the GPU works
    y = concat([y_gpu, to_vdevice(y_cpu, gpu)], axis)

With ``cpu_chunks`` > 1 (a CUDA pair's default, :attr:`DevicePair.cpu_chunks`), the CPU's
part of a row split runs as chunks of its rows (:func:`codl_tvm.geometry.row_chunks`), each
copied to the GPU as soon as it is computed, while the next chunk computes::

    y_cpu1 = op_cpu(x_cpu1); y_up1 = to_vdevice(y_cpu1, gpu)
    y_cpu2 = op_cpu(x_cpu2); y_up2 = to_vdevice(y_cpu2, gpu)
    y = concat([y_gpu, y_up1, y_up2], axis)

Unsplit ops run on their planned device, with ``to_vdevice`` only where the device changes.
Run it before ``LegalizeOps``; the module gets the pair's two VDevices (GPU first).
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax import op as rop
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..device import DevicePair, vdevice_index
from ..geometry import check_cpu_chunks
from ..graph import AnchorOp, entry_function, find_anchors
from ..plan import Plan
from ..split_rules import RULES, slice_const
from ..unit_geometry import ROLE_ORDER, cpu_row_chunks, h_parts, oc_parts
from .units import Unit, _resolve, build_units


@mutator
class _Partitioner(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, pair: DevicePair, units: list[Unit], io_role: str,
                 cpu_chunks: int = 1):
        super().__init__(mod)
        self.pair, self.io_role, self.cpu_chunks = pair, io_role, cpu_chunks
        self.unit_of_last: dict[relax.Var, Unit] = {}
        self.interior: set[relax.Var] = set()
        for unit in units:
            inner = [b.var for op in unit.ops for b in op.bindings]
            self.unit_of_last[inner[-1]] = unit
            self.interior.update(inner[:-1])
        self.role: dict[relax.Var, str] = {}
        self.copies: dict[tuple[relax.Var, str], relax.Var] = {}
        self.new_params: list[relax.Var] = []

    # ---- entry ----------------------------------------------------------------------------
    def rewrite(self, func: relax.Function) -> relax.Function:
        vdev = self.pair.vdevice(self.io_role)
        for p in func.params:
            ty = p.ty
            new = relax.Var(p.name, relax.TensorType(ty.shape, ty.dtype, vdev))
            self.set_var_remap(p, new)
            self.role[new] = self.io_role
            self.new_params.append(new)
        body = self.visit_with_new_scope(func.body)
        return relax.Function(self.new_params, body, attrs=func.attrs)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var in self.interior:
            return
        unit = self.unit_of_last.get(binding.var)
        value = self._emit_unit(unit) if unit is not None else self._default_value(binding)
        self._bind(binding.var, value)

    # ---- emission helpers -----------------------------------------------------------------
    def _bind(self, old: relax.Var, value: relax.Expr) -> None:
        if isinstance(value, relax.Var) and isinstance(old, relax.DataflowVar):
            new = value  # already bound by the unit's emission: no alias binding
        elif isinstance(old, relax.DataflowVar) or not self.builder_.current_block_is_dataflow():
            new = self.builder_.emit(value, name_hint=old.name)
        else:
            new = self.builder_.emit_output(self._to_io(value), name_hint=old.name)
        self._note_role(new, value)
        self.set_var_remap(old, new)

    def _note_role(self, var: relax.Var, value: relax.Expr) -> None:
        role = self._role_of(value)
        if role is not None:
            self.role[var] = role

    def _role_of(self, expr: relax.Expr) -> str | None:
        if isinstance(expr, relax.Var):
            return self.role.get(expr)
        if isinstance(expr, relax.Call):
            if isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.to_vdevice":
                return ROLE_ORDER[_vdev_index(self.pair, expr)]
            for arg in expr.args:
                role = self._role_of(arg)
                if role is not None:
                    return role
        if isinstance(expr, relax.Tuple):
            for field in expr.fields:
                role = self._role_of(field)
                if role is not None:
                    return role
        if isinstance(expr, relax.TupleGetItem):
            return self._role_of(expr.tuple_value)
        return None

    def _on(self, expr: relax.Expr, role: str) -> relax.Expr:
        """``expr`` on ``role``'s device, copying it (once per value) if it lives elsewhere."""
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self._on(f, role) for f in expr.fields])
        current = self._role_of(expr)
        if current is None or current == role:
            return expr
        if not isinstance(expr, relax.Var):
            expr = self.builder_.emit(expr)
            self.role[expr] = current
        key = (expr, role)
        if key not in self.copies:
            copy = self.builder_.emit(rop.to_vdevice(expr, self.pair.vdevice(role)))
            self.role[copy] = role
            self.copies[key] = copy
        return self.copies[key]

    def _to_io(self, value: relax.Expr) -> relax.Expr:
        if isinstance(value, relax.Tuple):
            return relax.Tuple([self._on(f, self.io_role) for f in value.fields])
        return self._on(value, self.io_role)

    def _emit_on(self, value: relax.Expr, role: str) -> relax.Var:
        var = self.builder_.emit(value)
        self.role[var] = role
        return var

    # ---- unplanned ops: run where their first input lives ---------------------------------
    def _default_value(self, binding: relax.VarBinding) -> relax.Expr:
        value = binding.value
        is_op = isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
        if not is_op or value.op.name in ("relax.to_vdevice", "relax.hint_on_device"):
            return self.visit_expr(value)
        # remap the arguments one by one: visiting the call itself would re-infer its type
        # before the arguments are on one device
        args = [self.visit_expr(a) for a in value.args]
        role = next((r for r in map(self._role_of, args) if r is not None), None)
        if role is not None:
            args = [self._on(a, role) for a in args]
        return relax.Call(value.op, args, value.attrs, value.ty_args)

    # ---- planned units -------------------------------------------------------------------
    def _emit_unit(self, unit: Unit) -> relax.Expr:
        data = self.visit_expr(unit.ops[0].data)
        if unit.place in ROLE_ORDER:
            x = self._on(data, unit.place)
            return self._emit_whole(unit, x, self._extra_args(unit, unit.place), unit.place)
        head, last = unit.ops[0], unit.ops[-1]
        rule = RULES[head.kind]
        if unit.dim == "H":
            parts = h_parts(unit.ops, unit.ratio)
            axis, srcs = rule.h_axis(head.call), {r: parts[r][0].src for r in ROLE_ORDER}
            out_axis = RULES[last.kind].h_axis(last.call)
        else:
            parts = oc_parts(unit.ops, unit.ratio)
            axis, srcs = rule.oc_axis(head.call), {r: parts[r][0].src for r in ROLE_ORDER}
            out_axis = RULES[last.kind].oc_axis(last.call)
        full = head.in_shape[axis]
        chunks = (cpu_row_chunks(unit.ops, parts["cpu"], self.cpu_chunks)
                  if unit.dim == "H" and self.cpu_chunks > 1 else [parts["cpu"]])
        if len(chunks) > 1:
            return self._emit_chunked(unit, data, axis, full, parts["gpu"], chunks, out_axis)
        # the CPU's input first: its slice and copy wait for no other kernel, and the copy
        # sits before the GPU launch (one-stream code waits for the whole stream at a copy)
        inputs, extras = {}, {}
        for r in reversed(ROLE_ORDER):
            inputs[r] = self._input_part(data, r, axis, srcs[r], full)
            extras[r] = self._extra_args(unit, r)
        outs = {r: self._emit_role(unit, inputs[r], extras[r], parts[r], r) for r in ROLE_ORDER}
        return rop.concat([outs["gpu"], self._on(outs["cpu"], "gpu")], axis=out_axis)

    def _emit_chunked(self, unit: Unit, data, axis: int, full: int, gpu, chunks,
                      out_axis: int) -> relax.Expr:
        """A row split whose CPU part runs chunk by chunk, each chunk's rows copied to the
        GPU right after it is computed (see the module doc)."""
        cpu_in = [self._input_part(data, "cpu", axis, c[0].src, full) for c in chunks]
        cpu_extras = self._extra_args(unit, "cpu")
        x_gpu = self._input_part(data, "gpu", axis, gpu[0].src, full)
        y_gpu = self._emit_role(unit, x_gpu, self._extra_args(unit, "gpu"), gpu, "gpu")
        ups = [self._on(self._emit_role(unit, x, cpu_extras, c, "cpu"), "gpu")
               for x, c in zip(cpu_in, chunks)]
        return rop.concat([y_gpu, *ups], axis=out_axis)

    def _extra_args(self, unit: Unit, role: str) -> list[list[relax.Expr]]:
        """Per op, its non-data arguments (weights) on ``role``'s device."""
        return [[self._on(self.visit_expr(a), role) for a in op.call.args[1:]] for op in unit.ops]

    def _input_part(
        self, data: relax.Expr, role: str, axis: int, src: tuple[int, int] | None, full: int
    ) -> relax.Expr:
        """Slice the input on the device that holds it, then copy the slice."""
        home = self._role_of(data) or self.io_role
        part = data
        if src is not None and src != (0, full):
            part = self._emit_on(rop.strided_slice(data, [axis], [src[0]], [src[1]]), home)
        return self._on(part, role)

    def _emit_role(self, unit: Unit, x, extras, parts, role: str) -> relax.Var:
        for op, args, part in zip(unit.ops, extras, parts):
            rule = RULES[op.kind]
            if unit.dim == "H":
                x = self._emit_on(rule.h_part(op.call, [x, *args], part), role)
                x = self._emit_epilogue(op, x, role, rule.h_axis(op.call), part.out)
            else:
                x = self._emit_on(rule.oc_part(op.call, [x, *args], part.units), role)
                x = self._emit_epilogue(op, x, role, rule.oc_axis(op.call), part.out)
        return x

    def _emit_whole(self, unit: Unit, x, extras, role: str) -> relax.Var:
        for op, args in zip(unit.ops, extras):
            call = relax.Call(op.call.op, [x, *args], op.call.attrs, op.call.ty_args)
            x = self._emit_on(call, role)
            x = self._emit_epilogue(op, x, role, None, None)
        return x

    def _emit_epilogue(self, op: AnchorOp, x, role: str, axis, rng) -> relax.Var:
        rank = len(op.out_shape)
        prev = op.bindings[0].var
        for b in op.bindings[1:]:
            args = []
            for a in b.value.args:
                if a.same_as(prev):
                    args.append(x)
                elif axis is not None and isinstance(a, tvm.ir.Constant):
                    args.append(_slice_broadcast(a, rank, axis, rng))
                else:
                    args.append(a)
            x = self._emit_on(relax.Call(b.value.op, args, b.value.attrs, b.value.ty_args), role)
            prev = b.var
        return x


def _slice_broadcast(const: tvm.ir.Constant, rank: int, axis: int, rng) -> relax.Expr:
    """Slice a broadcast operand of an epilogue to the part's range on ``axis``."""
    shape = const.value.shape
    local = axis - (rank - len(shape))
    if local < 0 or shape[local] == 1:
        return const
    return slice_const(const, local, rng[0], rng[1])


def _vdev_index(pair: DevicePair, call: relax.Call) -> int:
    index = vdevice_index(pair.vdevices, call.attrs.dst_vdevice)
    if index is None:
        raise ValueError(f"to_vdevice names a device outside the pair {pair.name}")
    return index


@tvm.transform.module_pass(opt_level=0, name="CoExecutionPartition")
class CoExecutionPartition:
    """Split the ops of ``plan`` between the CPU and the GPU of ``pair``.

    Parameters
    ----------
    plan : Plan
        Placement of every partitionable op (see :class:`codl_tvm.Plan`); validated against
        the module first (same model, known ops, legal dims).
    pair : DevicePair
        The two devices; the module's ``vdevice`` global info is set to ``pair.vdevices``.
    cpu_chunks : int
        Most chunks the CPU's part of a row split runs in, each copied to the GPU while the
        next computes (1: the part whole).
    """

    def __init__(self, plan: Plan, pair: DevicePair, cpu_chunks: int = 1):
        check_cpu_chunks(cpu_chunks)
        self.plan, self.pair, self.cpu_chunks = plan, pair, cpu_chunks

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        self.plan.validate(mod)
        func = entry_function(mod)
        anchors = find_anchors(func)
        units = [_resolve(u) for u in build_units(anchors, self.plan)]
        mod = mod.clone()
        mod.update_global_info("vdevice", self.pair.vdevices)
        new_func = _Partitioner(mod, self.pair, units, self.plan.io_device,
                                self.cpu_chunks).rewrite(func)
        gv = mod.get_global_var("main")
        mod[gv] = new_func
        return relax.transform.Normalize()(mod)
