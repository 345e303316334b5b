"""What the copies of a split cost on this machine's CUDA GPU: TVM's copies to and from pinned
and pageable host memory, and ``codl.copy_block``'s 2-D copies of a row block (the floors that
``coexec_conv.py run`` records beside its timings). Nothing where there is no CUDA GPU."""

from __future__ import annotations

import time

import numpy as np


def copy_floor(sizes_mb: tuple[int, ...] = (1, 2, 8), repeat: int = 20) -> list[dict]:
    """TVM's copies between the GPU and pinned / pageable host memory (median us)."""
    import tvm

    from codl_tvm import runtime

    gpu, cpu = tvm.cuda(0), tvm.cpu(0)
    rows: list[dict] = []
    if not gpu.exist:
        return rows
    for mb in sizes_mb:
        n = mb << 18  # float32 elements
        dev_t = tvm.runtime.empty((n,), "float32", gpu)
        for memory in ("pinned", "pageable"):
            host = runtime.host_tensor([n], "float32", cpu, pinned=memory == "pinned")
            for direction, (src, dst) in (("d2h", (dev_t, host)), ("h2d", (host, dev_t))):
                ts = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    src.copyto(dst)
                    gpu.sync()
                    ts.append(time.perf_counter() - t0)
                us = 1e6 * float(np.median(ts))
                rows.append({"mb": mb, "memory": memory, "direction": direction, "us": us,
                             "gb_per_s": (n * 4) / us / 1e3})
    return rows


def block_copy_floor(sizes_mb: tuple[int, ...] = (1, 2, 8), repeat: int = 20) -> list[dict]:
    """2-D block copies (``codl.copy_block``) of a row block, as a split moves it: rows 1..h
    of a (1, 64, h+1, 256) tensor to and from pinned host memory and within the GPU, beside
    TVM's contiguous copy within the GPU (median us; copy and sync)."""
    import tvm

    from codl_tvm import runtime, streams

    gpu, cpu = tvm.cuda(0), tvm.cpu(0)
    rows: list[dict] = []
    if not gpu.exist:
        return rows
    c, w = 64, 256
    for mb in sizes_mb:
        h = mb * (1 << 20) // (4 * c * w)
        row = 4 * w
        out_of = (row, (h + 1) * row, 0, h * row, h * row, c)  # rows 1..h of the taller one
        into = (0, h * row, row, (h + 1) * row, h * row, c)
        whole = tvm.runtime.empty((1, c, h + 1, w), "float32", gpu)
        block = tvm.runtime.empty((1, c, h, w), "float32", gpu)
        other = tvm.runtime.empty((1, c, h, w), "float32", gpu)
        host = runtime.host_tensor([1, c, h, w], "float32", cpu, pinned=True)
        cases = {"d2h": (streams.copy_block, whole, host, out_of),
                 "h2d": (streams.copy_block, host, whole, into),
                 "d2d": (streams.copy_block, whole, block, out_of),
                 "d2d contiguous (TVM)": (None, block, other, ())}
        for direction, (copy, src, dst, geometry) in cases.items():
            ts = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                if copy is None:
                    src.copyto(dst)
                else:
                    copy(src, dst, *geometry)
                gpu.sync()
                ts.append(time.perf_counter() - t0)
            us = 1e6 * float(np.median(ts))
            rows.append({"mb": mb, "direction": direction, "us": us,
                         "gb_per_s": (4 * c * h * w) / us / 1e3})
    return rows
