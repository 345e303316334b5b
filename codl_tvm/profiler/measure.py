"""Measure jobs here or over TVM RPC, appending rows to a samples CSV (resumable)."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from codl_tvm.device import DevicePair
from codl_tvm.profiler import bundle_runner as br
from codl_tvm.profiler.kernels import (
    TRANSFER_OPS,
    Entry,
    build_role_module,
    build_transfer_module,
    compile_module,
)
from codl_tvm.profiler.schema import SampleWriter, read_samples
from codl_tvm.profiler.space import Job

Batch = tuple[str | None, list[Job]]  # (role, jobs); role None: the 2-vdevice transfer module


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
    """Runtime devices of a module, in the VM's order (vdevice order for transfers)."""
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
) -> dict[str, int]:
    """Measure ``jobs`` not yet in ``output`` and append their rows; returns counts."""
    from tvm import relax

    session = session or Session()
    if Path(output).exists() and Path(output).stat().st_size > 0:
        read_samples(output, pair=pair.name)  # refuse to mix pairs in one file
    writer = SampleWriter(output)
    todo = [j for j in jobs if j.key(pair.name) not in writer.done]
    counts = {"measured": 0, "resumed": len(jobs) - len(todo)}
    bar = tqdm(total=len(todo), desc=f"profile {pair.name}", disable=not progress, unit="kernel")
    for n, (role, batch) in enumerate(plan_batches(todo, batch_size)):
        if role is None:
            mod, entries = build_transfer_module(batch, pair)
        else:
            mod, entries = build_role_module(batch, pair, role)
        lib = session.load(compile_module(mod, pair, role), f"lib{n}")
        devs = [session.device(k, i) for k, i in lib_devices(pair, role)]
        vm = relax.VirtualMachine(lib, devs)
        for entry in entries:
            in_devs, timer = entry_placement(entry, role)
            args = br.make_inputs([list(s) for s in entry.inputs], [devs[i] for i in in_devs])
            med, spread, rep, _ = br.time_function(vm, entry.name, args, devs[timer])
            row = entry_row(entry, pair)
            row.update(latency_us=round(med, 3), spread_us=round(spread, 3), repeat=rep)
            writer.write([row])
            counts["measured"] += 1
            bar.update(1)
    bar.close()
    return counts
