"""Memory a plan needs on each device: weights where they are read, plus the largest live
activations of one op (an estimate; the VM's memory planner reuses buffers between ops).

An H split needs the whole weight on both sides; an OC split only each side's slice
(CoDL section 4.1: weights are pre-arranged per processor).
"""

from __future__ import annotations

from .nodes import OpNode
from .search import Layout


def layout_memory(nodes: list[OpNode], lay: Layout) -> dict[str, int]:
    """``{"cpu_bytes", "gpu_bytes", "cpu_weight_bytes", "gpu_weight_bytes"}`` of ``lay``."""
    weights = {"cpu": 0, "gpu": 0}
    act = {"cpu": 0, "gpu": 0}
    for n in nodes:
        place, dim, ratio = lay.place(n.op_id)
        io = n.in_bytes + n.out_bytes
        if place in ("cpu", "gpu"):
            weights[place] += n.weight_bytes
            act[place] = max(act[place], io)
            continue
        share = {"gpu": ratio, "cpu": 1.0 - ratio}
        for role in ("cpu", "gpu"):
            w = n.weight_bytes if dim == "H" else n.weight_bytes * share[role]
            weights[role] += int(w)
            act[role] = max(act[role], int(io * share[role]) + (n.in_bytes if dim == "OC" else 0))
        act["gpu"] = max(act["gpu"], n.in_bytes + n.out_bytes)  # the GPU holds the full tensors
    return {"cpu_bytes": weights["cpu"] + act["cpu"], "gpu_bytes": weights["gpu"] + act["gpu"],
            "cpu_weight_bytes": weights["cpu"], "gpu_weight_bytes": weights["gpu"]}


def capped_bytes(nodes: list[OpNode], lay: Layout, shared_memory: bool = True) -> int:
    """The bytes a memory cap counts: both roles' where they share one memory, else the
    GPU's alone (a discrete GPU's memory is the scarce one; the CPU's copies of weights live
    in the host's)."""
    mem = layout_memory(nodes, lay)
    return mem["cpu_bytes"] + mem["gpu_bytes"] if shared_memory else mem["gpu_bytes"]
