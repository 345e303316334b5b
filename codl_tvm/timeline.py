"""Timelines of a co-executed model: boxes on a CPU lane and a GPU lane, and a picture of them.

:func:`layout` places one box per sub-op in the order the partitioned model runs them (CoDL
Eq. 2: a split op costs its sharing plus the slower of its two parts; inside a chain each
processor runs its parts back to back and data is shared only at the chain's ends; where the
costs' pair overlaps copies with kernels, a split's copies sit on the CPU's lane and its GPU
slice on the GPU's). A split unit is cut and its sharing priced as the planner's search does
(:mod:`codl_tvm.planner.sharing_costs`), so a split op's total is the planner's
:class:`~codl_tvm.planner.search.UnitCost`. The same ops run whole on one processor make the
CPU-only and GPU-only lanes. Whole branches of one group (an inception block's towers) on
different processors run at once, each processor's back to back from the group's start, as
the runtime issues them (:class:`~codl_tvm.passes.IssueGpuWorkFirst`); what that saves against
running them one after the other is ``overlap_us``. :func:`draw` renders it with matplotlib
(the optional ``plot`` extra).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from .outputs import atomic_file
from .planner.cost_source import CostSourceBase, as_source
from .predictor.split_sharing import SplitUnit, chunked_cpu, spec_parts

LANES = ("gpu", "cpu", "gpu-only", "cpu-only")
LANE_TITLES = {"gpu": "co-exec GPU", "cpu": "co-exec CPU", "gpu-only": "GPU only",
               "cpu-only": "CPU only"}  # fmt: skip
KIND_COLORS = {"conv2d": "#4c72b0", "matmul": "#55a868", "max_pool2d": "#dd8452",
               "avg_pool2d": "#c44e52"}  # fmt: skip
SHARE_COLOR = "#9a9a9a"
LABEL_MIN_FRACTION = 0.035  # boxes narrower than this share of the axis get no text


@dataclass(frozen=True)
class Box:
    """One bar: a (sub-)op's computation or a sharing step, on one lane."""

    lane: str
    start_us: float
    dur_us: float
    label: str
    kind: str  # op kind (conv2d, ...) or "share"


@dataclass
class Timeline:
    """Boxes of the co-executed run and of the single-processor runs, and their totals."""

    boxes: list[Box] = field(default_factory=list)
    coexec_us: float = 0.0
    share_us: float = 0.0
    cpu_only_us: float = 0.0
    gpu_only_us: float = 0.0
    overlap_us: float = 0.0  # saved by whole branches on both processors running at once

    def add(self, lane: str, start_us: float, dur_us: float, label: str, kind: str) -> float:
        if dur_us > 0:
            self.boxes.append(Box(lane, start_us, dur_us, label, kind))
        return start_us + dur_us

    def lane(self, name: str) -> list[Box]:
        return [b for b in self.boxes if b.lane == name]


def _units(rows: list[dict]) -> Iterator[list[dict]]:
    """Rows grouped as the pass runs them: a chain's rows together, other ops alone."""
    i = 0
    while i < len(rows):
        j = i + 1
        while rows[i]["chain"] and j < len(rows) and rows[j]["chain"] == rows[i]["chain"]:
            j += 1
        yield rows[i:j]
        i = j


def concurrent_branches(rows: list[dict], groups: list[list[list[str]]]
                        ) -> dict[str, tuple[int, bool]]:
    """Op id -> (group number, heads its branch), for the ops of whole branches of the groups
    (each a list of branches, each a list of op ids) with whole branches on both processors."""
    place = {r["op"]: r["place"] for r in rows}
    out: dict[str, tuple[int, bool]] = {}
    for g, branches in enumerate(groups):
        whole = [b for b in branches
                 if len({place.get(op) for op in b}) == 1 and place.get(b[0]) in ("cpu", "gpu")]
        if {"cpu", "gpu"} <= {place[b[0]] for b in whole}:
            out |= {op: (g, i == 0) for b in whole for i, op in enumerate(b)}
    return out


def layout(rows: list[dict], specs: dict, costs, io_device: str = "gpu",
           progress: bool | None = None,
           branches: list[list[list[str]]] | None = None) -> Timeline:
    """Place every op of ``rows`` (from :func:`codl_tvm.explain.plan_rows`) on the lanes.

    ``specs`` maps op id to ``(OpSpec, repeat)``; ``costs`` gives kernel, transfer and split
    sharing times, a split unit's sharing priced as the planner prices it
    (:meth:`~codl_tvm.planner.cost_source.CostSourceBase.split_sharing`). Fills each row's
    ``cpu_us``, ``gpu_us``, ``share_us`` and ``total_us``. ``branches``: groups of parallel
    branches (lists of op ids, :func:`codl_tvm.planner.branches.parallel_branches`); whole
    branches of a group on both processors overlap where the roles compute concurrently.
    """
    from tqdm import tqdm

    tl = Timeline()
    t, here = 0.0, io_device
    costs = as_source(costs)
    group = concurrent_branches(rows, branches or []) if costs.concurrent else {}
    running: _Group | None = None  # whole branches running at once
    show = costs.slow if progress is None else progress
    for unit in tqdm(list(_units(rows)), desc="timing ops", disable=not show, leave=False):
        g, head = group.get(unit[0]["op"], (None, False)) if len(unit) == 1 else (None, False)
        if running and running.number != g:  # the group is over: both processors meet
            t, running = running.close(tl), None
        if g is not None:
            running = running or _Group(g, here, t)
            here = running.add(tl, unit[0], specs, costs, head)
        elif unit[0]["place"] == "split":
            t = _split_unit(tl, t, here, unit, specs, costs)
            here = "gpu"
        else:
            t, here = _whole_op(tl, t, here, unit[0], specs, costs)
    if running:
        t = running.close(tl)
    tl.coexec_us = t
    tl.share_us = _sharing_us(tl)
    for role in ("cpu", "gpu"):
        end = 0.0
        for row in rows:
            spec, repeat = specs[row["op"]]
            end = tl.add(f"{role}-only", end, kernel_us(costs, row, role, spec) * repeat,
                         row["op"], row["kind"])
        setattr(tl, f"{role}_only_us", end)
    return tl


def kernel_us(costs: CostSourceBase, row: dict, role: str, spec) -> float:
    """``spec`` (the row's op or a part of it) on ``role``; a conv2d_transpose's on the kernel
    the dispatch runs it with (its spec is the conv over its dilated input)."""
    if row["kind"] == "conv2d_transpose":
        return costs.transposed_conv_us(role, spec)
    return costs.kernel_us(role, spec)


def _sharing_us(tl: Timeline) -> float:
    """Time of the sharing boxes: those holding both processors once, and those on one lane
    (where copies overlap kernels, the CPU's copies sit on its lane alone)."""
    both = {(b.start_us, b.dur_us, b.label) for b in tl.lane("gpu") if b.kind == "share"}
    alone = [b for b in tl.lane("cpu")
             if b.kind == "share" and (b.start_us, b.dur_us, b.label) not in both]
    return sum(d for _, d, _ in both) + sum(b.dur_us for b in alone)


def _share(tl: Timeline, t: float, dur_us: float, label: str) -> float:
    """Sharing holds both processors (a to_vdevice synchronises them)."""
    tl.add("cpu", t, dur_us, label, "share")
    return tl.add("gpu", t, dur_us, label, "share")


def _fill(row: dict, cpu_us: float, gpu_us: float, share_us: float,
          total_us: float | None = None) -> None:
    row.update(cpu_us=cpu_us, gpu_us=gpu_us, share_us=share_us,
               total_us=share_us + max(cpu_us, gpu_us) if total_us is None else total_us)


def _whole_op(tl: Timeline, t: float, here: str, row: dict, specs: dict,
              costs: CostSourceBase):
    spec, repeat = specs[row["op"]]
    role = row["place"]
    move = costs.move_us(spec, f"to_{role}") * repeat if here != role else 0.0
    t = _share(tl, t, move, f"to {role}")
    kernel = kernel_us(costs, row, role, spec) * repeat
    _fill(row, kernel if role == "cpu" else 0.0, kernel if role == "gpu" else 0.0, move)
    return tl.add(role, t, kernel, row["op"], row["kind"]), role


@dataclass
class _Group:
    """Whole branches of one group running at once: each processor's clock from the start."""

    number: int
    source: str  # the device holding the group's input
    start_us: float
    clocks: dict[str, float] = field(default_factory=dict)
    serial_us: float = 0.0  # its ops' totals, one after the other

    def add(self, tl: Timeline, row: dict, specs: dict, costs: CostSourceBase,
            head: bool) -> str:
        """Lay out one op on its processor's clock; a branch's head first copies the group's
        input to its processor, on that processor's lane (the runtime issues those copies
        first). Returns the processor."""
        spec, repeat = specs[row["op"]]
        role = row["place"]
        move = costs.move_us(spec, f"to_{role}") * repeat if self.source != role and head else 0
        start = tl.add(role, self.clocks.get(role, self.start_us), move, f"to {role}", "share")
        kernel = kernel_us(costs, row, role, spec) * repeat
        _fill(row, kernel if role == "cpu" else 0.0, kernel if role == "gpu" else 0.0, move)
        self.clocks[role] = tl.add(role, start, kernel, row["op"], row["kind"])
        self.serial_us += row["total_us"]
        return role

    def close(self, tl: Timeline) -> float:
        """Where both processors are done; adds what running at once saved to the total."""
        end = max(self.clocks.values(), default=self.start_us)
        tl.overlap_us += self.serial_us - (end - self.start_us)
        return end


def _split_unit(tl: Timeline, t: float, here: str, unit: list[dict], specs: dict,
                costs: CostSourceBase) -> float:
    """A split unit: its sharing priced as the planner's search prices it
    (:class:`~codl_tvm.planner.search.UnitCost`), its parts back to back on each lane.

    Where copies overlap kernels (``costs.overlap``) the CPU's slice comes before both
    parts, the GPU's slice (and, with block copies, its part's copy into the output) on the
    GPU's lane, the copies on the CPU's and the concat after both; else all of the sharing
    holds both processors, before the parts and after them. Where the roles share cores
    (not ``costs.concurrent``) each part waits for the one before."""
    first, repeat = specs[unit[0]["op"]]
    back = costs.move_us(first, "to_gpu") * repeat if here == "cpu" else 0.0
    parts = _unit_parts(unit, specs)
    share = costs.split_sharing(SplitUnit(first, specs[unit[-1]["op"]][0], unit[0]["dim"],
                                          unit[0]["ratio"], parts, repeat))
    cpu_us: list[float | None] = [None] * len(unit)  # the CPU part's, where it runs in chunks
    if unit[0]["dim"] == "H" and costs.overlap and costs.cpu_chunks > 1:
        kernels = [partial(kernel_us, costs, row) for row in unit]
        chunked = chunked_cpu(parts["cpu"], repeat, costs.cpu_chunks, kernels,
                              costs.sharing_us, share)
        if chunked is not None:
            cpu_us, share = list(chunked[0]), chunked[1]
    if costs.overlap:
        lead, join = back + share.lead_us, share.join_us
        pre = {"cpu": share.to_cpu_us, "gpu": share.gpu_slice_us}
        post = {"cpu": share.to_gpu_us, "gpu": share.gpu_join_us}
    else:
        lead, join = back + share.pre_us, share.post_us
        pre = post = {"cpu": 0.0, "gpu": 0.0}
    t = _share(tl, t, lead, ("slice + back" if back else "slice") if costs.overlap
               else "slice + to cpu")
    ends = {"cpu": tl.add("cpu", t, pre["cpu"], "to cpu", "share"),
            "gpu": tl.add("gpu", t, pre["gpu"], "slice", "share")}
    for i, row in enumerate(unit):
        times = _parts(tl, ends, row, specs, costs, {r: p[i] for r, p in parts.items()},
                       cpu_us[i])
        side = {r: (pre[r] if i == 0 else 0.0) + (post[r] if i == len(unit) - 1 else 0.0)
                for r in ("cpu", "gpu")}
        shared = (lead if i == 0 else 0.0) + (join if i == len(unit) - 1 else 0.0)
        each = (times["cpu"] + side["cpu"], times["gpu"] + side["gpu"])
        total = shared + (max(each) if costs.concurrent else sum(each))
        _fill(row, times["cpu"], times["gpu"], shared + side["cpu"] + side["gpu"], total)
    ends["cpu"] = tl.add("cpu", ends["cpu"], post["cpu"], "to gpu", "share")
    ends["gpu"] = tl.add("gpu", ends["gpu"], post["gpu"], "copy in", "share")
    return _share(tl, max(ends.values()), join, "to gpu + concat" if not costs.overlap
                  else "concat")


def _unit_parts(unit: list[dict], specs: dict) -> dict[str, list]:
    """Per role, each row's sub-op: cut as the planner and the partition pass cut a unit
    (rows grow backwards through a chain), else each op's own share."""
    dim, ratio = unit[0]["dim"], unit[0]["ratio"]
    ops = [specs[row["op"]][0] for row in unit]
    return spec_parts(ops, dim, ratio) or {
        role: [op.part(role, dim, ratio) for op in ops] for role in ("cpu", "gpu")}


def _parts(tl: Timeline, ends: dict[str, float], row: dict, specs: dict,
           costs: CostSourceBase, parts: dict, cpu_us: float | None = None) -> dict[str, float]:
    """The row's sub-ops on each lane after ``ends`` (moved on); its kernel time per role
    (``cpu_us``: the CPU's, where its part runs in chunks)."""
    repeat = specs[row["op"]][1]
    times = {}
    for role in ("cpu", "gpu"):
        part = parts[role]
        if role == "cpu" and cpu_us is not None:
            times[role] = cpu_us
        else:
            times[role] = (kernel_us(costs, row, role, part) * repeat if part is not None
                           else 0.0)
        start = ends[role] if costs.concurrent else max(ends.values())
        ends[role] = tl.add(role, start, times[role], row["op"], row["kind"])
    return times


# ---- drawing -----------------------------------------------------------------------------
def draw(tl: Timeline, path: str | Path, title: str = "", unit: str = "us") -> Path:
    """Render ``tl`` to an image file (PNG, SVG or PDF by suffix).

    Raises
    ------
    ImportError
        When matplotlib (``pip install 'codl-tvm[plot]'``) is not installed.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    scale, xlabel = _x_scale(tl, unit)
    fig = Figure(figsize=(12, 3.8), dpi=130, layout="constrained")
    ax = fig.add_subplot()
    span = max(tl.coexec_us, tl.cpu_only_us, tl.gpu_only_us) * scale or 1.0
    ypos = {lane: len(LANES) - i - (0.6 if i >= 2 else 0) for i, lane in enumerate(LANES)}
    for box in tl.boxes:
        _bar(ax, box, ypos[box.lane], scale, span)
    totals = {"gpu": tl.coexec_us, "cpu": tl.coexec_us, "gpu-only": tl.gpu_only_us,
              "cpu-only": tl.cpu_only_us}  # fmt: skip
    for lane, y in ypos.items():
        ax.text(totals[lane] * scale + span * 0.008, y, _num(totals[lane] * scale),
                va="center", ha="left", fontsize=8)
    ax.axvline(tl.coexec_us * scale, color="black", lw=0.8, ls="--")
    ax.set_yticks(list(ypos.values()), [LANE_TITLES[lane] for lane in ypos])
    ax.set_xlim(0, span * 1.08)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9, loc="left")
    ax.spines[["top", "right"]].set_visible(False)
    kinds = sorted({b.kind for b in tl.boxes if b.kind != "share"})
    handles = [Patch(color=KIND_COLORS.get(k, "#8172b3"), label=k) for k in kinds]
    handles.append(Patch(facecolor="white", edgecolor=SHARE_COLOR, hatch="////",
                         label=f"sharing ({tl.share_us * scale:.3g})"))
    ax.legend(handles=handles, loc="upper center", fontsize=8, ncols=len(handles),
              bbox_to_anchor=(0.5, -0.16), frameon=False)  # below: a long title runs under it
    path = Path(path)
    with atomic_file(path, suffix=path.suffix) as tmp:
        fig.savefig(tmp)
    return path


def _num(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _x_scale(tl: Timeline, unit: str) -> tuple[float, str]:
    if unit != "us":
        return 1.0, f"placeholder work ({unit}): proportional to FLOPs, NOT a measured time"
    longest = max(tl.coexec_us, tl.cpu_only_us, tl.gpu_only_us)
    return (1e-3, "time (ms)") if longest >= 2000 else (1.0, "time (us)")


def _bar(ax, box: Box, y: float, scale: float, span: float) -> None:
    share = box.kind == "share"
    ax.barh(y, box.dur_us * scale, left=box.start_us * scale, height=0.7,
            color="white" if share else KIND_COLORS.get(box.kind, "#8172b3"),
            edgecolor=SHARE_COLOR if share else "white", hatch="////" if share else None,
            linewidth=0.6)  # fmt: skip
    if not share and box.dur_us * scale >= LABEL_MIN_FRACTION * span:
        ax.text((box.start_us + box.dur_us / 2) * scale, y, _short(box.label), ha="center",
                va="center", fontsize=7, color="white", clip_on=True)


def _short(op_id: str) -> str:
    """conv2d_12 -> c12, max_pool2d_0 -> mp0: readable inside narrow boxes."""
    kind, _, k = op_id.rpartition("_")
    return {"conv2d": "c", "matmul": "mm", "max_pool2d": "mp", "avg_pool2d": "ap"}.get(kind,
                                                                                       kind) + k
