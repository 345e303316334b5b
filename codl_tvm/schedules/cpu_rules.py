"""CPU kernels other than the convs: pooling and matmul."""

from __future__ import annotations

import math

from tvm import te, tirx
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from codl_tvm import tiling

from .analysis import OpInfo
from .blocking import Blocking
from .prepack import WeightPacked, has_block
from .target_info import TargetInfo

PANEL_VECTORS = (4, 2)  # packed matmul: weight panel widths tried, in SIMD vectors (16 or 8
# accumulators with 4 rows; benchmarks/cpu_gemm_variants.py)
# ... with 16 vector registers (AVX2, SSE; ``cpu_matmul_rows``): 4 x 4 accumulators left no
# register for the panel's loads and the row's broadcast, so panels of 2 vectors by 6 rows
# (12 accumulators, the tile of MLAS's AVX2 SGEMM kernel and of the 1x1 GEMM's cpu_gemm_rows)
NARROW_PANEL_VECTORS, NARROW_PANEL_ROWS = (2,), 6


def schedule_pool(sch: Schedule, info: OpInfo, t: TargetInfo, rule: str) -> Blocking:
    """Parallel over (batch, channel, row); epilogue computed per row. The pad is inlined into
    the window loop, except where :func:`tiling.pool_copies_rows` says a task copies the padded
    rows its window reads first (computed at the task loop: a few rows, in L1)."""
    main = sch.get_sblock(info.main_block)
    loops = sch.get_loops(main)
    task = sch.fuse(*loops[:3])
    sch.parallel(task)
    for name in reversed(info.prologue):
        pad = sch.get_sblock(name)
        if _copies_rows(sch, pad, main):
            sch.compute_at(pad, task)
        else:
            sch.compute_inline(pad)
    for name in info.epilogue[:1]:
        sch.reverse_compute_at(sch.get_sblock(name), task)
    for name in info.epilogue[1:]:
        sch.reverse_compute_inline(sch.get_sblock(name))
    n, ch, oh, ow = info.out_shape
    return Blocking(
        algorithm="pool", processor="cpu", op="pool2d", output_size=n * ch * oh * ow,
        block_shape={"oc": 1, "h": 1, "w": ow}, basic_unit_shape={"w": 1},
        num_blocks=n * ch * oh, cores=t.cores, vector_lanes=t.lanes,
        grid={"parallel": n * ch * oh}, rule=rule,
    )


def _copies_rows(sch: Schedule, pad: SBlockRV, main: SBlockRV) -> bool:
    """:func:`tiling.pool_copies_rows` of the pool whose pad block is ``pad``: a max pool (its
    window reduces with ``max``) whose padded buffer has more rows than its input."""
    block = sch.get(pad)
    rows_in = int(block.reads[0].source.shape[2])
    rows_pad = int(block.writes[0].source.shape[2])
    is_max = isinstance(sch.get(main).body.value, tirx.Max)
    return tiling.pool_copies_rows(is_max, rows_pad - rows_in)


def matmul_tiles(m: int, n: int, t: TargetInfo) -> tuple[int, int, int]:
    """(row tile, column block, columns computed by the vector main part)."""
    mi = min(m, 4)
    vb = tiling.matmul_vector_block(n, t.lanes)
    return mi, vb, n // vb * vb


def unravel(i, dims: tuple[int, ...]) -> tuple:
    """Flat index ``i`` over ``dims`` as one index per axis (unit axes 0, no division for
    the outermost axis that is not)."""
    out, live = [], [d for d in dims if d != 1]
    for d in reversed(dims):
        if d == 1:
            out.append(0)
            continue
        live.pop()
        out.append(i % d if live else i)
        i = i // d if live else i
    return tuple(reversed(out))


def ravel(idx, dims: tuple[int, ...]):
    """One index per axis of ``dims`` as the flat index (unit axes skipped)."""
    flat = None
    for d, x in zip(dims, idx, strict=True):
        if d != 1:
            flat = x if flat is None else flat * d + x
    return 0 if flat is None else flat


def _matmul_parts(rows: int, k: int, n: int, t: TargetInfo, load) -> list:
    """The vector main part over whole column blocks and the tail, ``(*rows, cols)`` each:
    ``load(row_index, r, j)`` is one product of the reduction."""
    _, _, n_main = matmul_tiles(rows[-1], n, t)

    def part(name: str, lo: int, hi: int) -> te.Tensor:
        r = te.reduce_axis((0, k), name="k")
        return te.compute((*rows, hi - lo),
                          lambda *ij: te.sum(load(ij[:-1], r, ij[-1] + lo), axis=r), name=name)

    spans = (("codl_mm_main", 0, n_main), ("codl_mm_tail", n_main, n))
    return [part(name, lo, hi) for name, lo, hi in spans if hi > lo], n_main


def _unpack(shape: tuple, parts: list, n_main: int, key) -> te.Tensor:
    """The output: each element from its part, at ``key(leading indices)`` in it."""
    def value(*idx):
        lead, j = key(idx[:-1]), idx[-1]
        if len(parts) == 1:
            return parts[0][(*lead, j)]
        return tirx.if_then_else(j < n_main, parts[0][(*lead, j)],
                                 parts[1][(*lead, j - n_main)])

    return te.compute(tuple(tirx.IntImm("int64", d) for d in shape), value, name="codl_unpack")


def matmul_compute(m: int, k: int, n: int, t: TargetInfo, rows: tuple[int, ...] = ()):
    """``build(a, b) -> out``: a vector main part over whole column blocks plus a tail.
    ``rows``: the shape of ``a``'s and ``out``'s axes before the last (batch axes, then M;
    their product is ``m``), for an ``a`` of more than two axes ([1, M, K], [1, H, W, C])."""
    rows = rows or (m,)
    nr = packed_panel(m, n, t)

    def dense(a: te.Tensor, weight_at) -> te.Tensor:  # weight_at(r, j): the weight's (r, j)
        parts, n_main = _matmul_parts(
            (m,), k, n, t, lambda i, r, j: a[(*unravel(i[0], rows), r)] * weight_at(r, j))
        return _unpack((*rows, n), parts, n_main, lambda lead: (ravel(lead, rows),))

    if not nr:
        return lambda a, b: dense(a, lambda r, j: b[r, j])

    def pack(b: te.Tensor) -> te.Tensor:  # (K, N) -> (N / nr, K, nr) panels
        return te.compute((n // nr, k, nr), lambda jo, r, ji: b[r, jo * nr + ji],
                          name="codl_wpack")

    return WeightPacked(pack, lambda a, p: dense(a, lambda r, j: p[j // nr, r, j % nr]))


def gemv_panel(t: TargetInfo) -> int:
    """Columns of one weight panel of the GEMV that reads a weight packed at load
    (``KernelVariants.cpu_gemv_panels``): the packed matmul's widest panel."""
    return _panel_vectors(t)[0] * t.lanes


def gemv_panel_compute(m: int, k: int, n: int, t: TargetInfo, rows: tuple[int, ...]):
    """The GEMV's version for a constant weight: the weight in ``(ceil(N / nr), K, nr)``
    panels, zero columns past N, so a task streams one contiguous panel (the streamed GEMV
    reads a run of every weight row: ``(K, N)``); only :mod:`.prepack`'s version is used, as
    packing on every call would cost more than the product."""
    nr = gemv_panel(t)
    padded = math.ceil(n / nr) * nr

    def pack(b: te.Tensor) -> te.Tensor:
        return te.compute((padded // nr, k, nr), lambda jo, r, ji: tirx.if_then_else(
            jo * nr + ji < n, b[r, jo * nr + ji], tirx.const(0.0, b.dtype)), name="codl_wpack")

    def body(a: te.Tensor, p: te.Tensor) -> te.Tensor:
        r = te.reduce_axis((0, k), name="k")
        main = te.compute((m, padded), lambda i, j: te.sum(
            a[(*unravel(i, rows), r)] * p[j // nr, r, j % nr], axis=r), name="codl_mm_main")
        return _unpack((*rows, n), [main], padded, lambda lead: (ravel(lead, rows),))

    return WeightPacked(pack, body)


def schedule_gemv_panels(sch: Schedule, m: int, n: int, t: TargetInfo, rule: str,
                         lead: int) -> Blocking:
    """:func:`gemv_panel_compute`'s kernel, tiled as the packed matmul's."""
    nr = gemv_panel(t)
    return _schedule_packed(sch, m, math.ceil(n / nr) * nr, nr, t, rule, lead, 1)


def batched_matmul_compute(batch: tuple[int, ...], m: int, k: int, n: int, t: TargetInfo):
    """``build(a, b) -> out``: one (M, K) x (K, N) matmul per index of the ``batch`` axes both
    operands lead with (attention's Q K^T and P V), parts as :func:`matmul_compute`'s."""
    def build(a: te.Tensor, b: te.Tensor) -> te.Tensor:
        def load(gi, r, j):
            g = unravel(gi[0], batch)
            return a[(*g, gi[1], r)] * b[(*g, r, j)]

        parts, n_main = _matmul_parts((math.prod(batch), m), k, n, t, load)
        return _unpack((*batch, m, n), parts, n_main,
                       lambda lead: (ravel(lead[:-1], batch), lead[-1]))

    return build


def _tile_tasks(sch: Schedule, blk: SBlockRV, outer: list, r, tile: list) -> SBlockRV:
    """The ``outer`` loops fused into parallel tasks, each running K (``r``) over its ``tile``
    (rows, [blocks,] vectors, lanes: rows and vectors unrolled, lanes vectorised) into an
    accumulator cached locally per task; returns the accumulator's write-back block."""
    sch.reorder(*outer, r, *tile)
    task = sch.fuse(*outer)
    sch.parallel(task)
    acc = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(acc, task)
    sch.unroll(tile[0])
    sch.unroll(tile[-2])
    sch.vectorize(tile[-1])
    sch.decompose_reduction(blk, r)
    return acc


def _blocks_per_task(m: int, k: int, n: int, t: TargetInfo) -> int:
    mi, vb, n_main = matmul_tiles(m, n, t)
    return tiling.matmul_blocks_per_task(n_main // vb, math.ceil(m / mi), k * n_main * 4, t.cores)


def schedule_matmul(sch: Schedule, m: int, k: int, n: int, t: TargetInfo, rule: str,
                    lead: int = 0, batch: int = 1) -> Blocking:
    """``lead``: axes of the output before its rows; ``batch``: matmuls in the kernel (one per
    index of a batched matmul's leading axes, each a parallel task's worth of work or more)."""
    mi, vb, n_main = matmul_tiles(m, n, t)
    names = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}
    nr = packed_panel(m, n, t)
    if nr:
        return _schedule_packed(sch, m, n, nr, t, rule, lead, batch)
    if "codl_mm_main" in names:
        blk = sch.get_sblock("codl_mm_main")
        *g, i, j, r = sch.get_loops(blk)
        io, ii = sch.split(i, [None, mi])
        # Each task streams a contiguous chunk of up to 16 column blocks of every weight row
        # (the (K, N) weight is read row-wise, which is what bounds a GEMV).
        per_task = _blocks_per_task(m, k, n, t)
        jo, jm, jv = sch.split(j, [None, per_task, vb])
        ju, jl = sch.split(jv, [None, t.lanes])
        _tile_tasks(sch, blk, [*g, jo, io], r, [ii, jm, ju, jl])
    if "codl_mm_tail" in names:
        blk = sch.get_sblock("codl_mm_tail")
        *g, i, j, r = sch.get_loops(blk)
        sch.parallel(sch.fuse(*g, i, j))
    loops = sch.get_loops(sch.get_sblock("codl_unpack"))
    sch.parallel(sch.fuse(*loops[:lead + 1]) if lead else loops[0])
    blocks = max(1, n_main // vb)
    per_task = _blocks_per_task(m, k, n, t)
    tasks = blocks // per_task * math.ceil(m / mi) * batch
    return Blocking(
        algorithm="gemv" if m == 1 else "gemm", processor="cpu", op="matmul",
        output_size=m * n * batch, block_shape={"m": mi, "n": vb * per_task},
        basic_unit_shape={"n": t.lanes},
        num_blocks=tasks, cores=t.cores, vector_lanes=t.lanes, grid={"parallel": tasks},
        rule=rule,
    )


def packed_panel(m: int, n: int, t: TargetInfo) -> int:
    """Columns of one weight panel of the packed kernel (``KernelVariants.cpu_matmul``:
    ``packed``, the default), or 0 for the streamed one: a GEMV streams (packing on every call
    would cost as much as the product; its version for a constant weight reads panels packed
    at load, :func:`gemv_panel_compute`), and N must be whole panels of two or four vectors."""
    if tiling.current_variants().cpu_matmul != "packed" or m <= tiling.GEMV_MAX_ROWS:
        return 0
    return next((v * t.lanes for v in _panel_vectors(t) if n % (v * t.lanes) == 0), 0)


def _panel_vectors(t: TargetInfo) -> tuple[int, ...]:
    """Widths of the packed matmul's weight panels, in SIMD vectors, widest first."""
    return NARROW_PANEL_VECTORS if _narrow(t) else PANEL_VECTORS


def packed_rows(m: int, t: TargetInfo) -> int:
    """Rows of the packed kernel's register tile: 4, or 6 on 16 registers (``_narrow``)."""
    return min(m, NARROW_PANEL_ROWS if _narrow(t) else 4)


def _narrow(t: TargetInfo) -> bool:
    """The packed matmul's tile for 16 vector registers (``KernelVariants.cpu_matmul_rows``)."""
    return t.vector_regs < 32 and tiling.current_variants().cpu_matmul_rows


def _schedule_packed(sch: Schedule, m: int, n: int, nr: int, t: TargetInfo, rule: str,
                     lead: int, batch: int) -> Blocking:
    """The weight in ``(N / nr, K, nr)`` panels (copied once at compile time where it is a
    constant, :mod:`.prepack`, else inside the kernel); each task a tile of
    ``mi`` rows x ``nr`` columns over all of K, its accumulators in registers (the streamed
    kernel keeps a task's accumulator in memory)."""
    mi = packed_rows(m, t)
    blk = sch.get_sblock("codl_mm_main")
    if has_block(sch, "codl_wpack"):  # not in the version that reads packed panels
        *outer, cols = sch.get_loops(sch.get_sblock("codl_wpack"))
        sch.vectorize(sch.split(cols, [None, t.lanes])[-1])
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    *g, i, j, r = sch.get_loops(blk)
    io, ii = sch.split(i, [None, mi])
    jo, ju, jl = sch.split(j, [None, nr // t.lanes, t.lanes])
    acc = _tile_tasks(sch, blk, [*g, jo, io], r, [ii, ju, jl])
    sch.vectorize(sch.split(sch.get_loops(acc)[-1], [None, t.lanes])[-1])
    loops = sch.get_loops(sch.get_sblock("codl_unpack"))
    sch.parallel(sch.fuse(*loops[:lead + 1]) if lead else loops[0])
    tasks = n // nr * math.ceil(m / mi) * batch
    return Blocking(
        algorithm="gemm-packed", processor="cpu", op="matmul", output_size=m * n * batch,
        block_shape={"m": mi, "n": nr}, basic_unit_shape={"n": t.lanes}, num_blocks=tasks,
        cores=t.cores, vector_lanes=t.lanes, grid={"parallel": tasks}, rule=rule,
    )
