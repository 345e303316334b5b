"""Where TVM's static chunking puts the CPU kernels' work and data: counts for ``cpu_terms``.

TVM's thread pool gives worker ``i`` of a parallel loop of ``n`` iterations the chunk
``[i*c, (i+1)*c)``, ``c = ceil(n / workers)`` (the generated parallel lambda computes it from
``num_task``), for every parallel loop of a kernel alike. Data one loop's worker wrote (a packed
panel, a result tile) stays in that worker's core's caches; where the next loop's chunks differ,
another core reads it. These functions count such reads and the rows, panels and tiles one
worker or one core touches (from the kernels' TIR and assembly with 16 workers).
"""

from __future__ import annotations

from codl_tvm.predictor.gpu_terms import _cdiv
from codl_tvm.predictor.mirror import Machine
from codl_tvm.predictor.opspec import OpSpec


def conv_core_row_pairs(m: Machine, tasks_per_row: int, tasks: int) -> int:
    """Most (channel block, output row) pairs of the direct conv's tasks that one physical
    core runs.

    TVM's parallel loop is chunked statically: worker ``i`` of the pool's ``m.cores``
    runs tasks ``[i*c, (i+1)*c)``, ``c = ceil(tasks / cores)`` (the generated code computes
    its range from ``num_task``; ``waves`` is ``c``). Workers ``2k, 2k+1`` are taken as the
    two hyperthreads of one core (``m.cpu_smt``; the guest shows no SMT topology, but the 1x1
    samples fit pairs, 77%, and reject single workers, 65%), sharing its L2: a core runs the
    contiguous ``cpu_smt * c`` tasks of (channel block, row, column tile) order."""
    per_core = _cdiv(tasks, m.cores) * m.cpu_smt
    most = 0
    for a in range(0, tasks, per_core):
        b = tasks if a + per_core > tasks else a + per_core
        n = (b - 1) // tasks_per_row - a // tasks_per_row + 1
        most = n if n > most else most
    return most


def conv_core_rows(s: OpSpec, m: Machine, tasks_per_row: int, tasks: int) -> int:
    """Most output rows of the direct conv's tasks that one physical core runs: its
    :func:`conv_core_row_pairs`, a row counted once per row index, as a later channel block
    re-reads it from that core's L2."""
    return min(conv_core_row_pairs(m, tasks_per_row, tasks), s.out_h)


def conv_unpack_remote_tiles(ocp: int, out_h: int, nx: int, cores: int) -> int:
    """Register tiles of the packed conv result that the unpack reads from another worker.

    The conv's parallel loop runs (channel block, row, column tile) tasks, the unpack's
    (channel block, row) tasks (:func:`unpack_by_block`), each chunked statically: worker
    ``w`` runs conv tasks ``[w*cw, (w+1)*cw)`` and unpacks rows ``[w*cu, (w+1)*cu)`` (``cw``,
    ``cu`` = ceil(tasks / cores)). A packed row's tile stays in the L2 of the worker that
    wrote it; where the two chunkings disagree (several channel blocks, or rows that do not
    divide evenly) the unpack reads it across cores. Returns the total over the workers."""
    tasks, rows = ocp * out_h * nx, ocp * out_h
    cw, cu = _cdiv(tasks, cores), _cdiv(rows, cores)
    if cw == cu * nx:  # the chunkings coincide
        return 0
    remote = 0
    # (conditionals, not min/max: every prediction of a conv runs this loop)
    for w in range(cores):
        e = (w + 1) * cu
        a, b = w * cu * nx, (rows if e > rows else e) * nx  # conv tasks of its unpack rows
        if b <= a:
            break
        lo, hi = w * cw, (w + 1) * cw
        own = (b if b < hi else hi) - (a if a > lo else lo)
        remote += b - a - (own if own > 0 else 0)
    return remote


def conv_core_panels(ocp: int, tasks_per_block: int, cores: int) -> tuple[int, int]:
    """Weight panels (channel blocks) the workers' chunks of conv tasks span: (the most one
    worker's chunk spans, the sum over the workers).

    Tasks run in (channel block, row, column tile) order, ``tasks_per_block`` per block, and
    worker ``w`` gets ``[w*c, (w+1)*c)``, ``c = ceil(tasks / cores)``."""
    tasks = ocp * tasks_per_block
    c = _cdiv(tasks, cores)
    most = total = 0
    for a in range(0, tasks, c):
        b = tasks if a + c > tasks else a + c
        n = (b - 1) // tasks_per_block - a // tasks_per_block + 1
        most = n if n > most else most
        total += n
    return most, total


def gemm_remote_panel_floats(pp: int, ocp: int, ic: int, mr: int, np_: int, cores: int) -> int:
    """Floats of packed panels the busiest GEMM worker reads that other workers packed.

    TVM's thread pool hands worker ``i`` of a parallel loop of ``n`` iterations the static
    chunk ``[i * ch, (i + 1) * ch)``, ``ch = ceil(n / cores)`` (the parallel lambda computes
    ``sdiv(n + num_task - 1, num_task)``). The GEMM loop fuses (pixel tile po, OC block o), o
    innermost, so a chunk spans ``min(ch, ocp)`` weight panels ``[o, IC, mr]`` and the pixel
    tiles its range crosses; the weight pack's loop (o, k) and the input pack's (po, k) left
    each panel's rows in the caches of the workers that wrote them: a worker's own rows are
    local, the rest cross cores. (Rows of panels: offsets in units of one k row.)"""
    tasks = pp * ocp
    ch = _cdiv(tasks, cores)
    wch, xch = _cdiv(ocp * ic, cores), _cdiv(pp * ic, cores)  # the packs' chunks, in k rows
    wall = ocp * ic
    worst = w0 = x0 = 0  # w0, x0: first weight / input row the worker packed
    # (branches instead of min/max: the predictor runs this for every prediction, 16 workers)
    for a in range(0, tasks, ch):
        n = tasks - a if a + ch > tasks else ch
        w1, x1 = w0 + wch, x0 + xch
        lo = a % ocp * ic
        if n >= ocp:  # every weight panel
            e = wall if w1 > wall else w1
            w = wall - (e - w0 if e > w0 else 0)
        elif lo + n * ic <= wall:  # panels o .. o + n - 1
            e = lo + n * ic if w1 > lo + n * ic else w1
            s = lo if lo > w0 else w0
            w = n * ic - (e - s if e > s else 0)
        else:  # wraps into the next pixel tile: panels o .. ocp - 1 and 0 ..
            e = wall if w1 > wall else w1
            s = lo if lo > w0 else w0
            e2 = lo + n * ic - wall
            e2 = e2 if w1 > e2 else w1
            w = n * ic - (e - s if e > s else 0) - (e2 - w0 if e2 > w0 else 0)
        p0, p1 = a // ocp * ic, ((a + n - 1) // ocp + 1) * ic  # its pixel tiles' rows
        e = p1 if x1 > p1 else x1
        s = p0 if p0 > x0 else x0
        v = w * mr + (p1 - p0 - (e - s if e > s else 0)) * np_
        if v > worst:
            worst = v
        w0, x0 = w1, x1
    return worst
