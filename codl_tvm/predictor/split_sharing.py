"""The one price of a split unit's sharing (CoDL Eq. 2's sharing terms), for the planner's
search (:class:`~codl_tvm.planner.search.UnitCost`), ``explain``'s timeline and the
predictor's ``predict_op`` alike.

A *unit* is one op or a chain of ops split together (:class:`SplitUnit`; :func:`spec_parts`
cuts it); data is shared only at its ends: the CPU's part of the first op's input goes to the
CPU, the CPU's part of the last op's output comes back, and, where each part reads its own
slice of the input (rows, or the channels of a grouped conv), slices are cut first. No TVM
import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from codl_tvm.geometry import chain_row_parts, row_chunks, rows_back, split_count
from codl_tvm.predictor.opspec import OpSpec

# ``cost(op, role, nbytes)``: a cost source's ``sharing_us``
ShareFn = Callable[[str, str, float], float]
# ``kernel(role, sub)``: a cost source's ``kernel_us``
KernelFn = Callable[[str, OpSpec], float]


@dataclass(frozen=True, eq=False)
class SplitUnit:
    """A unit as it is priced: its first and last op (batch 1), the split, and per role the
    sub-op of every member (``parts[role][0]`` the first's, ``[-1]`` the last's; None where
    the role gets nothing). ``repeat``: batch repeats of every member; ``out_bytes``: the
    last op's whole output (all repeats), which a concat joins."""

    first: OpSpec
    last: OpSpec
    dim: str
    ratio: float
    parts: dict[str, list[OpSpec | None]]
    repeat: int = 1
    out_bytes: float | None = None

    @staticmethod
    def of(spec: OpSpec, dim: str, ratio: float, repeat: int = 1) -> SplitUnit:
        """One op split alone."""
        parts = {role: [part] for role, part in spec.parts(dim, ratio).items()}
        return SplitUnit(spec, spec, dim, ratio, parts, repeat)


@dataclass(frozen=True)
class SplitSharing:
    """A split unit's sharing by where it runs: the CPU's slice (``lead_us``: a GPU kernel
    both parts wait for), the GPU's slice (on the GPU's side; a ``copy_gpu`` where rows move by
    block copies), the copies to and from the CPU (on the CPU's side where copies overlap
    kernels), the concat after both parts (``join_us``) and, with block copies, the GPU part's
    copy into the output (``gpu_join_us``, on the GPU's side)."""

    lead_us: float = 0.0
    gpu_slice_us: float = 0.0
    to_cpu_us: float = 0.0
    to_gpu_us: float = 0.0
    join_us: float = 0.0
    gpu_join_us: float = 0.0

    @property
    def pre_us(self) -> float:
        """Before the parts run, where nothing overlaps."""
        return self.lead_us + self.gpu_slice_us + self.to_cpu_us

    @property
    def post_us(self) -> float:
        """After the parts ran, where nothing overlaps."""
        return self.to_gpu_us + self.join_us + self.gpu_join_us

    @property
    def cpu_side_us(self) -> float:
        """The copies to and from the CPU (they delay the CPU's part where copies overlap)."""
        return self.to_cpu_us + self.to_gpu_us

    @property
    def gpu_side_us(self) -> float:
        """The GPU's slice and its part's block copy into the output."""
        return self.gpu_slice_us + self.gpu_join_us


def price_split(cost: ShareFn, unit: SplitUnit, blocks: bool = False,
                in_kernels: bool = True) -> SplitSharing:
    """The sharing of ``unit`` from ``cost(op, role, nbytes)``.

    Each side reads its own slice of the first op's input where the split is by rows or the
    first op is grouped (a depthwise conv's channels): a slice for the CPU's part before both
    parts, one for the GPU's where it reads less than the whole input. The CPU's part of the
    input goes to the CPU and of the output back; the parts are joined by a concat unless a
    batch-1 output is written in place (:meth:`OpSpec.joins_in_place`). Batch repeats move
    together (``repeat`` times the bytes, one transfer each).

    ``blocks``: the pair moves row slices and joins with 2-D copies
    (:class:`~codl_tvm.passes.LowerSlicesToBlockCopies`, batch 1 only): no slice kernel before
    both parts and no concat; the GPU's kernels read their rows of the whole input and write
    them into the output (``in_kernels``, the default build: nothing moves on the GPU's side),
    or the GPU's slice and its part's copy into the output are copies within the GPU
    (``copy_gpu``; ``block_in_kernels=False``).
    """
    cpu, gpu = unit.parts["cpu"], unit.parts["gpu"]
    if cpu[0] is None or cpu[-1] is None:
        return SplitSharing()
    rep, head = unit.repeat, unit.first
    cpu_in = cpu[0].in_bytes * rep
    lead = gpu_slice = join = gpu_join = 0.0
    whole = gpu[0] is None or gpu[-1] is None  # the GPU gets nothing: copies only
    blocks = blocks and rep == 1
    if not whole and (unit.dim == "H" or head.groups > 1):
        lead = 0.0 if blocks else cost("slice", "gpu", cpu_in)
        gpu_in = gpu[0].in_bytes * rep
        if gpu_in < head.in_bytes * rep and not (blocks and in_kernels):
            gpu_slice = cost("copy_gpu" if blocks else "slice", "gpu", gpu_in)
    to_cpu = cost("to_cpu", "cpu", cpu_in)
    to_gpu = cost("to_gpu", "gpu", cpu[-1].out_bytes * rep)
    if not whole and (rep > 1 or not unit.last.joins_in_place(unit.dim)):
        if blocks:  # the GPU's part into its rows of the output, on the GPU's side
            gpu_join = 0.0 if in_kernels else cost("copy_gpu", "gpu", gpu[-1].out_bytes)
        else:
            out = unit.last.out_bytes * rep if unit.out_bytes is None else unit.out_bytes
            join = cost("concat", "gpu", out)
    return SplitSharing(lead, gpu_slice, to_cpu, to_gpu, join, gpu_join)


def spec_parts(specs: list[OpSpec], dim: str, ratio: float) -> dict[str, list[OpSpec]] | None:
    """Per role, the sub-op of every op of a unit (batch 1) split on ``dim`` at ``ratio``;
    None when one side gets nothing or a part cannot work (the planner's
    :func:`~codl_tvm.planner.search.unit_parts`, and ``explain``'s)."""
    if dim == "H":  # the cut of the partition pass (unit_geometry.h_parts)
        ops = [(s.window_h, s.H) for s in specs]
        rows = chain_row_parts(ops, specs[-1].out_h, ratio)
        if rows is None:
            return None
        return {role: [replace(s, H=rp.src[1] - rp.src[0],
                               pad=(rp.pad[0], s.pad[1], rp.pad[1], s.pad[3]))
                       for s, rp in zip(specs, rows[role], strict=True)]
                for role in ("gpu", "cpu")}
    units = specs[0].units("OC")
    if split_count(units, ratio) in (0, units):
        return None
    out: dict[str, list[OpSpec]] = {}
    for role in ("gpu", "cpu"):
        subs = [s.part(role, "OC", ratio) for s in specs]
        if any(s is None for s in subs):
            return None
        out[role] = subs
    return out


def cpu_chunk_specs(cpu: list[OpSpec], max_chunks: int, repeat: int = 1
                    ) -> list[list[OpSpec]]:
    """The CPU's part of an H-split unit (``cpu``: :func:`spec_parts`'s, one sub-op per
    member; ``repeat`` batch repeats) in the chunks the partition pass runs it in
    (:func:`codl_tvm.unit_geometry.cpu_row_chunks`): ``[cpu]`` where it stays whole."""
    ops = [(s.window_h, s.H) for s in cpu]  # the part as a chain of its own, its pads
    out: list[list[OpSpec]] = []
    last = cpu[-1]
    for rows in row_chunks(0, last.out_h, max_chunks, last.out_bytes * repeat / last.out_h):
        chain = rows_back(ops, rows)
        if chain is None:
            return [cpu]
        out.append([replace(s, H=rp.src[1] - rp.src[0],
                            pad=(rp.pad[0], s.pad[1], rp.pad[1], s.pad[3]))
                    for s, rp in zip(cpu, chain, strict=True)])
    return out if len(out) > 1 else [cpu]


def pipelined_us(chunk_us: Sequence[float], upload_us: Sequence[float]) -> float:
    """From the first CPU chunk's start until the last chunk's rows are on the GPU: chunks
    compute back to back, and each chunk's upload starts when it is computed and the one
    before has landed (one copy stream)."""
    done = landed = 0.0
    for compute, upload in zip(chunk_us, upload_us, strict=True):
        done += compute
        landed = max(landed, done) + upload
    return landed


def chunked_cpu(cpu: list[OpSpec], repeat: int, max_chunks: int,
                kernel: KernelFn | Sequence[KernelFn], cost: ShareFn, sharing: SplitSharing
                ) -> tuple[list[float], SplitSharing] | None:
    """A row split whose CPU part runs in chunks, as the planner and ``explain`` price it:
    per member op, its CPU kernel time summed over the chunks, and the split's sharing with
    the chunks' rows moved to the CPU (``to_cpu_us``: one transfer, every chunk's halo
    included) and only what no later chunk hides of their uploads left (``to_gpu_us``; each
    upload priced as a transfer of its own). None where the part stays whole. ``kernel``:
    one pricing for every member op, or one per member (a conv2d_transpose's is its own).
    """
    chunks = cpu_chunk_specs(cpu, max_chunks, repeat)
    if len(chunks) < 2:
        return None
    kernels = [kernel] * len(cpu) if callable(kernel) else list(kernel)
    compute = [[k("cpu", s) * repeat for k, s in zip(kernels, c, strict=True)] for c in chunks]
    uploads = [cost("to_gpu", "gpu", c[-1].out_bytes * repeat) for c in chunks]
    # the chunks' rows go to the host back to back and the host waits once: one transfer
    downloads = cost("to_cpu", "cpu", sum(c[0].in_bytes for c in chunks) * repeat)
    per_chunk = [sum(c) for c in compute]
    exposed = pipelined_us(per_chunk, uploads) - sum(per_chunk)
    per_op = [sum(times) for times in zip(*compute, strict=True)]
    return per_op, replace(sharing, to_cpu_us=downloads, to_gpu_us=exposed)
