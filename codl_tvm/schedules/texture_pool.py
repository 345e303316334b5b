"""Max pooling that reads a texture, with its 4-lane accumulator kept whole.

TVM 0.27's ``dl.adreno.Pool2D`` caches the pool's output in ``local`` memory and computes the
write-back *inside* the 4-lane loop it then vectorizes: the local buffer covers one lane,
compacts to ``float acc[1]``, is allocated outside the vectorized loop, and all four lanes
accumulate into element 0 (the generated kernel indexes it with ``(int4)(0, 0, 0, 0)``), so
only lane 3, written last, is right. Here the write-back sits at the thread's loop, so the
accumulator holds the four lanes, and both the reduction and the write-back are vectorized
over them.
"""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight import analysis
from tvm.target import Target

MAX_THREADS = 256  # threads per block, as dl.adreno.Pool2D


def _bind_threads(sch: s_tir.Schedule, loop: s_tir.schedule.LoopRV) -> s_tir.schedule.LoopRV:
    extent = int(sch.get(loop).extent)
    tx_extent = min(extent & ~(extent - 1), MAX_THREADS)  # largest power of two dividing it
    bx, tx = sch.split(loop, [None, tx_extent])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return tx


class TexturePool2D(dl.adreno.Pool2D):
    """``dl.adreno.Pool2D`` with the write-back of the lane accumulator outside the lanes."""

    def apply(self, func: tirx.PrimFunc, target: Target, _: bool) -> s_tir.Schedule | None:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock(name="root", func_name="main"))
        if not {"adaptive_pool_sum", "pool_max"} & {sch.get(b).name_hint for b in blocks}:
            return None
        reduced = False
        for blk in blocks:
            name = sch.get(blk).name_hint
            if name == "pad_temp":
                *outer, lanes = sch.get_loops(blk)
                sch.vectorize(lanes)
                _bind_threads(sch, sch.fuse(*outer))
            elif name in ("adaptive_pool_sum", "pool_max"):
                info = analysis.get_sblock_info(sch, blk)
                if "".join(it.kind for it in info.iters) != "SSSSSRR":
                    return None
                loops = sch.get_loops(blk)
                write = sch.cache_write(blk, 0, "local")
                tx = _bind_threads(sch, sch.fuse(*loops[:4]))
                sch.reverse_compute_at(write, tx)
                sch.vectorize(loops[4])
                sch.vectorize(sch.get_loops(write)[-1])
                reduced = True
            else:
                try:
                    (sch.reverse_compute_inline if reduced else sch.compute_inline)(blk)
                except Exception:  # noqa: BLE001 - as dl.adreno.Pool2D: leave what will not inline
                    pass
        return sch
