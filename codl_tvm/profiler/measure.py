"""Measure jobs here or over TVM RPC, appending rows to a samples CSV (resumable)."""

from __future__ import annotations

import gc
import itertools
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from codl_tvm.device import DevicePair
from codl_tvm.predictor.opspec import BYTES_PER_ELEM
from codl_tvm.profiler import bundle_runner as br
from codl_tvm.profiler import codegen_facts, machine_facts, space
from codl_tvm.profiler.cpu_pool import target_threads, use_cpu_threads
from codl_tvm.profiler.kernels import (
    TRANSFER_OPS,
    Entry,
    build_role_module,
    compile_module,
    transfer_entries,
)
from codl_tvm.profiler.rounds import Item, Protocol, RoundBook, interleave, run_rounds
from codl_tvm.profiler.schema import COLUMNS, read_samples, row_key
from codl_tvm.profiler.space import Job
from codl_tvm.tiling import current_variants

Batch = tuple[str | None, list[Job]]  # (role, jobs); role None: staged copies


def plan_batches(jobs: Sequence[Job], batch_size: int = 24) -> list[Batch]:
    """Group jobs into modules: transfers together, the rest per role, cheapest first."""
    transfers = [j for j in jobs if j.op in TRANSFER_OPS]
    out: list[Batch] = [(None, transfers)] if transfers else []
    for role in ("gpu", "cpu"):
        mine = sorted((j for j in jobs if j.op not in TRANSFER_OPS and j.role == role),
                      key=lambda j: j.flops)  # fmt: skip
        out += [(role, mine[i : i + batch_size]) for i in range(0, len(mine), batch_size)]
    return out


def lib_devices(pair: DevicePair, role: str | None) -> list[list[Any]]:
    """Runtime devices of a module, in the VM's order (GPU, CPU for copies)."""
    if role is None:
        roles = ["gpu", "cpu"]
    else:
        roles = [role] + (["cpu"] if pair.runtime_kind(role) != "cpu" else [])
    return [[pair.runtime_kind(r), pair.runtime_index(r)] for r in roles]


def entry_placement(entry: Entry, role: str | None) -> tuple[list[int], int]:
    """(device index of each input, index of the device to time on) in ``lib_devices`` order."""
    if role is not None:
        return [0] * len(entry.inputs), 0
    return [0 if r == "gpu" else 1 for r in entry.input_roles], 0


def entry_row(entry: Entry, pair: DevicePair) -> dict[str, Any]:
    target = pair.gpu_spec if entry.job.role == "gpu" else pair.cpu_spec
    b = entry.blocking
    row = entry.job.row(pair.name, target)
    row.update(algorithm=b.algorithm, block=b.block, unit=b.unit, cores=b.cores)
    return row


class Session:
    """Where kernels run: this process, or a TVM RPC server (direct or through a tracker)."""

    def __init__(self, rpc: str | None = None, tracker: str | None = None, key: str | None = None):
        self.remote = None
        if rpc and tracker:
            raise ValueError("give either --rpc host:port or --rpc-tracker host:port, not both")
        if rpc or tracker:
            from tvm import rpc as tvm_rpc

            host, port = _host_port(rpc or tracker)
            if rpc:
                self.remote = tvm_rpc.connect(host, port, key=key or "")
            else:
                if not key:
                    raise ValueError("--rpc-tracker needs --rpc-key KEY")
                self.remote = tvm_rpc.connect_tracker(host, port).request(key)
        self._tmp = tempfile.TemporaryDirectory(prefix="codl-profile-")

    def load(self, exe: Any, name: str) -> Any:
        if self.remote is None:
            return exe
        path = Path(self._tmp.name, f"{name}.so")
        exe.export_library(str(path))
        self.remote.upload(str(path))
        return self.remote.load_module(path.name)

    def device(self, kind: str, index: int) -> Any:
        return br.device(kind, index, self.remote)

    def release_memory(self) -> None:
        """Hand the runtime's pooled device memory back (TVM's pooled allocators keep every
        buffer a VM ever freed, one pool per device and process, until cleared)."""
        import tvm_ffi

        if self.remote is None:
            clear = tvm_ffi.get_global_func("vm.builtin.memory_manager.clear", allow_missing=True)
        else:
            try:
                clear = self.remote.get_function("vm.builtin.memory_manager.clear")
            except (AttributeError, RuntimeError):
                clear = None
        if clear is not None:
            clear()

    def remote_cpu_facts(self) -> dict[str, Any]:
        """The remote CPU's facts where the server is codl-tvm's (``codl.rpc.machine_facts``);
        none locally or from a plain TVM RPC server."""
        if self.remote is None:
            return {}
        try:
            return dict(json.loads(self.remote.get_function("codl.rpc.machine_facts")()))
        except (AttributeError, RuntimeError, ValueError):
            return {}


def _host_port(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {addr!r}")
    return host, int(port)


def measure(
    pair: DevicePair,
    jobs: Sequence[Job],
    output: str | Path,
    session: Session | None = None,
    batch_size: int = 24,
    progress: bool = True,
    proto: Protocol | None = None,
) -> dict[str, int]:
    """Measure ``jobs`` not yet final in ``output`` with the rounds protocol; returns counts.

    The modules are compiled, loaded and measured a chunk at a time (:func:`chunk_batches`:
    at most ``MEMORY_BUDGET_BYTES`` of tensors held at once, as a loaded VM keeps its last
    inputs and outputs); within a chunk the kernels are visited in rounds, round-robin over
    GPU, CPU and copy modules (:func:`codl_tvm.profiler.rounds.run_rounds`), and the chunk's
    modules are released before the next one is compiled.
    """
    proto = proto or Protocol()
    session = session or Session()
    if Path(output).exists() and Path(output).stat().st_size > 0:
        read_samples(output, pair=pair.name)  # refuse to mix pairs in one file
    gpu = None if pair.runtime_kind("gpu") == "cpu" else session.device(
        pair.runtime_kind("gpu"), pair.runtime_index("gpu"))
    facts = {**session.remote_cpu_facts(), **machine_facts.detect(gpu, host=session.remote is None)}
    machine_facts.write(output, {**codegen_facts.detect(pair.cpu_spec), **facts,
                                 "kernel_variants": current_variants().to_json(),
                                 "protocol": proto.to_json()})
    book = RoundBook(output, COLUMNS, row_key)
    # block copies are timed in this process (over RPC they are priced as the slice kernel)
    jobs = space.for_pair(jobs, (pair.runs_block_copies or pair.is_cpu_only)
                          and session.remote is None)
    todo = [j for j in jobs if not book.final(_job_key(j, pair))]
    use_cpu_threads(target_threads(pair.cpu_spec), session.remote)
    resumed = len(jobs) - len(todo)
    batches = plan_batches(todo, batch_size)
    compiling = tqdm(total=len(batches), desc="compile", disable=not progress)
    bar = tqdm(total=len(todo) * proto.rounds, desc=f"profile {pair.name}",
               disable=not progress, unit="visit")  # fmt: skip
    measured = 0
    for chunk in chunk_batches(batches):
        groups: list[list[Item]] = []
        for n in chunk:
            groups.append(_items(n, batches[n], pair, session, proto))
            compiling.update(1)
        items = interleave(_by_role(groups, [batches[n] for n in chunk]))
        base = bar.n
        counts = run_rounds(items, book, proto, deadline_s=float("inf"),
                            progress=lambda done, _, b=base: bar.update(b + done - bar.n))
        measured += counts["measured"]
        resumed += counts["resumed"]
        del groups, items  # the chunk's VMs and the tensors they hold go before the next
        gc.collect()
        session.release_memory()
    compiling.close()
    bar.close()
    return {"measured": measured, "resumed": resumed}


# Tensors the loaded modules of one chunk may hold at once: a VM keeps the last inputs and
# outputs of every function it ran, so a profile that loaded all its modules before visiting
# them (628 kernels of the default cpu-pair profile) outgrew a 24 GB machine. The kernels'
# own buffers (padded and packed copies, Winograd's transforms; the VM's allocator keeps
# them) come on top of what :func:`job_bytes` counts: with 2 GiB a quick cpu-pair profile,
# one chunk, peaked at 4.46 GB resident on a 2-core Zen 4 host, with 1 GiB at 2.88 GB
MEMORY_BUDGET_BYTES = 1 << 30


def job_bytes(job: Job) -> int:
    """Bytes a visit of ``job`` leaves in its VM: inputs, weights and outputs (a copy's
    tensors are made per visit and freed after it: none)."""
    if job.spec is None:
        return 0
    s = job.sub
    weights = s.OC * s.IC // max(1, s.groups) * s.KH * s.KW * BYTES_PER_ELEM
    return s.in_bytes + s.out_bytes + weights


def chunk_batches(batches: Sequence[Batch], budget: int | None = None) -> list[list[int]]:
    """The batches' indices in chunks of at most ``budget`` bytes (default
    :data:`MEMORY_BUDGET_BYTES`; :func:`job_bytes`; a
    batch larger than the budget is a chunk of its own), the roles taken in turn so that
    each chunk mixes GPU, CPU and copy modules as the rounds expect."""
    by_role: dict[str | None, list[int]] = {}
    for n, (role, _) in enumerate(batches):
        by_role.setdefault(role, []).append(n)
    order = [n for turn in itertools.zip_longest(*by_role.values()) for n in turn
             if n is not None]  # fmt: skip
    budget = MEMORY_BUDGET_BYTES if budget is None else budget
    chunks: list[list[int]] = []
    used = 0
    for n in order:
        size = sum(job_bytes(j) for j in batches[n][1])
        if not chunks or (used + size > budget and chunks[-1]):
            chunks.append([])
            used = 0
        chunks[-1].append(n)
        used += size
    return chunks


def _items(n: int, batch: Batch, pair: DevicePair, session: Session, proto: Protocol
           ) -> list[Item]:
    """The visits of batch ``n``: its module compiled and loaded (copies: none)."""
    from tvm import relax

    role, jobs = batch
    devs = [session.device(k, i) for k, i in lib_devices(pair, role)]
    if role is None:  # staged copies: no module
        local = session.remote is None
        return [Item(entry_row(e, pair), br.copy_visit(_entry_doc(e), devs, proto, local),
                     "copies", e.job.flops) for e in transfer_entries(jobs)]  # fmt: skip
    mod, entries = build_role_module(jobs, pair, role)
    lib = session.load(compile_module(mod, pair, role), f"lib{n}")
    vm = relax.VirtualMachine(lib, devs)
    return [Item(entry_row(e, pair), _visit(vm, e, role, devs, proto), f"lib{n}", e.job.flops)
            for e in entries]  # fmt: skip


def _job_key(job: Job, pair: DevicePair) -> dict[str, Any]:
    target = pair.gpu_spec if job.role == "gpu" else pair.cpu_spec
    return job.row(pair.name, target)


def _visit(vm: Any, entry: Entry, role: str | None, devs: list[Any], proto: Protocol):
    def visit() -> tuple[list[float], float]:
        in_devs, timer = entry_placement(entry, role)
        args = br.make_inputs([list(s) for s in entry.inputs], [devs[i] for i in in_devs])
        cold = br.cold_weights(proto, entry.job.op, devs[timer])
        return br.time_function(vm, entry.name, args, devs[timer], proto, cold)

    return visit


def _entry_doc(entry: Entry) -> dict[str, Any]:
    """The manifest fields of a copy entry the runner's :func:`~.bundle_runner.copy_visit`
    reads."""
    in_devs, timer = entry_placement(entry, None)
    return {"inputs": [list(s) for s in entry.inputs], "input_devices": in_devs,
            "timer_device": timer, "op": entry.job.op}


def _by_role(groups: list[list[Item]], batches: list[Batch]) -> list[list[Item]]:
    """Per role (gpu, cpu, copy) the items of its modules in order, for round-robin."""
    roles: dict[str, list[Item]] = {}
    for items, (role, _) in zip(groups, batches, strict=True):
        roles.setdefault(role or "copy", []).extend(items)
    return list(roles.values())
