"""Analytic blocking terms of the codl-tvm CPU kernels (CoDL Eq. 3; see ``blocking.py``).

Every term counts the work of the critical core (waves of parallel tasks over ``m.cores``) or a
parallel memory pass, and the cache, TLB and code-generation regimes read off the kernels'
compiled code on the H100 host's Sapphire Rapids (assembly of the LLVM output). Mirrors
``schedules/cpu_conv.py``, ``cpu_gemm.py``, ``cpu_winograd.py`` and ``cpu_group_conv.py``;
pooling, GEMV and elementwise passes are in ``cpu_stream_terms``.
"""

from __future__ import annotations

from codl_tvm import tiling
from codl_tvm.predictor.cpu_chunks import (
    conv_core_panels,
    conv_core_row_pairs,
    conv_unpack_remote_tiles,
    gemm_remote_panel_floats,
)
from codl_tvm.predictor.cpu_passes import (
    conv_panel_floats,
    conv_refetch_floats,
    direct_written_bytes,
    gemm_pass_bytes,
    winograd_streamed_bytes,
)
from codl_tvm.predictor.cpu_stream_terms import _l2s_bytes
from codl_tvm.predictor.gpu_terms import _cdiv
from codl_tvm.predictor.mirror import (
    Machine,
    conv_shape,
    depthwise_tasks,
    direct_pad,
    pad_gathered,
    padded_in,
)
from codl_tvm.predictor.opspec import OpSpec


def _over_l1(task_bytes: int, m: Machine) -> bool:
    """A task's operand panel no longer stays in L1 across its reduction loop."""
    return task_bytes > m.cpu_l1_bytes


def _rows_read(s: OpSpec, out_rows: int) -> int:
    """Input rows the window reads for ``out_rows`` consecutive output rows: the whole span,
    but a window shorter than the stride (1x1 at stride 2) skips the rows in between (their
    lines are never loaded: a 1x1 stride-2 model that fetched them ran 1.2-1.8x over the
    body-layer stratum's rows, ``benchmarks/results/body-h100``)."""
    if s.dilation == 1 and s.KH < s.SH:
        return out_rows * s.KH
    return (out_rows - 1) * s.SH + (s.KH - 1) * s.dilation + 1


def direct_padded_in(s: OpSpec, m: Machine) -> tuple[int, int]:
    """Rows, cols of the padded input the direct conv (:func:`cpu_conv`) copies (samples)."""
    _, xt = tiling.direct_tiles(conv_shape(s), m, m.variants.cpu_even_tiles)
    return direct_pad(s, _cdiv(s.out_w, xt) * xt)


def conv_spills(s: OpSpec, m: Machine, vecs: int, xt: int) -> bool:
    """Whether the direct conv's hot loop spills registers to the stack (see :func:`cpu_conv`).

    From the Sapphire Rapids assembly of KW 2..7, SW 1..2, one or two vectors, xt 3..14: the
    register file is full with a two-vector 14-column tile (28 accumulators + 2 weights + a
    broadcast: 31 of 32 zmm); even KW at stride 1 unrolls without reusing broadcasts, and
    KW >= 6 is not unrolled at two vectors. One-vector tiles spill at stride 2 from KW 4."""
    full = xt * vecs + vecs + 1 >= m.vector_regs - 1
    odd_or_strided = s.KW % 2 == 1 or s.SW > 1
    return (full and 3 <= s.KW <= 5 and odd_or_strided) or (
        vecs == 1 and xt == 14 and s.SW == 2 and s.KW >= 4)


# the names of cpu_conv's terms, in the order it returns them (ties name a term, not a column:
# reorder both together; a test checks the lengths agree)
CPU_CONV_TERMS = ("fma", "spill_or_k1_fetch", "pad", "weight_pack", "unpack", "l1_spill",
                  "input_fetch", "unpack_remote", "panels", "panels_all_workers", "unpack_l1",
                  "pad_gathered", "written_past_l2s")  # fmt: skip


def _packs(m: Machine) -> float:
    """1 where the samples' kernels packed their weight on every call, 0 where it was packed
    once at compile time (``KernelVariants.cpu_prepack``)."""
    return 0.0 if m.variants.cpu_prepack else 1.0


def cpu_conv(s: OpSpec, m: Machine) -> list[float]:
    """direct-nchwc: tasks (ocb channels, 1 row, x_tile cols); work = IC*KH*KW vector FMAs
    per (x_tile x ocb/lanes) register tile, stack spills per (IC, KH) step where the hot loop
    spills (:func:`conv_spills`); the input rows one core fetches (:func:`conv_core_rows`),
    again for each channel block where they outgrow its L2 (:func:`conv_refetch_floats`);
    the weight panels one worker streams in (:func:`conv_core_panels`); plus pad,
    weight-pack and unpack passes, and the packed tiles the unpack reads from other workers
    (:func:`conv_unpack_remote_tiles`), and the pad pass's gathered copy where LLVM vectorizes
    it across rows (:func:`mirror.pad_gathered`). (The accumulator init and write-back per
    task fitted to nothing beside the spills.)"""
    ocb, xt = tiling.direct_tiles(conv_shape(s), m, m.variants.cpu_even_tiles)
    vecs = ocb // m.lanes
    ocp = _cdiv(s.OC, ocb)
    owp = _cdiv(s.out_w, xt) * xt
    waves = _cdiv(ocp * s.out_h * _cdiv(s.out_w, xt), m.cores)
    hp, wp = direct_pad(s, owp)
    red = s.reduction
    nx = owp // xt
    # input rows one core's L2 fetches (from L3 / the cores that ran the pad pass): every
    # rc step of the hot loop broadcasts from the next padded input plane (H*wp*4 B on: a
    # new page, beyond the stride prefetcher), so each input row a core's tasks touch comes
    # in once (its other channel blocks and column tiles reuse it from the L2), and the part
    # of them beyond the L2 again for every later channel block
    pairs = conv_core_row_pairs(m, nx, ocp * s.out_h * nx)
    rows = pairs if pairs < s.out_h else s.out_h
    fetch = min(hp, _rows_read(s, rows)) * s.IC * wp
    fetch += conv_refetch_floats(fetch, rows, pairs, m.cpu_l2_bytes_per_core)
    k1 = s.KH * s.KW == 1
    panels = conv_core_panels(ocp, s.out_h * nx, m.cores)
    return [
        waves * red * xt * vecs,  # FMAs on the critical core
        # register spills: LLVM fully unrolls the rx loop of a 3..5-wide window and keeps the
        # broadcast inputs the rx steps share (column x*SW + rx); with the register file
        # full it spills accumulators and broadcasts: ~20-30 stack stores + reloads per
        # (rc, ry) step of 84-140 FMAs (47x47 34->214 k3s2 ran 0.85x the model without this)
        # (never for 1x1, whose model takes the input fetch in this slot instead)
        fetch if k1 else waves * s.IC * s.KH * conv_spills(s, m, vecs, xt),
        s.IC * hp * wp / m.cores,  # padded input copy
        ocp * ocb * red / m.cores * _packs(m),  # weight pack (every call, unless prepacked)
        s.out_elems / m.cores,  # unpack
        # weight vector loads of the critical core once a task's packed weight panel
        # (ocb x IC*KH*KW floats) spills L1: they come from L2 on every register tile
        waves * red * vecs * _over_l1(ocb * red * 4, m),
        0.0 if k1 else fetch,  # the input fetch of the KxK model (see the second term)
        # unpack reads of packed tiles another worker's conv tasks wrote (from its L2, across
        # the mesh), per core (:func:`conv_unpack_remote_tiles`): the unpack is ~45% of the
        # IC=3 first layers, whose row splits of two channel blocks misalign the chunks
        # (POSENET 27x256 3->64: 78% of the tiles, ran 1.27x the model without this; the
        # channel splits of one block line up exactly); the 1x1 model fits it to zero
        0.0 if k1 else conv_unpack_remote_tiles(ocp, s.out_h, nx, m.cores) * xt * ocb / m.cores,
        # the weight panels (ocb x IC*KH*KW floats each) the workers' tasks span
        # (:func:`conv_core_panels`): the weight pack's parallel (o, ci, r, s) loop spread
        # every panel over all the workers, so a conv worker's first sweep of each streams it
        # from the other cores' L2s / L3: the busiest worker's panels at a core's rate (fits
        # ~43 GB/s), and all the workers' streams through the shared L3 / mesh (their sum per
        # core; fits ~170 GB/s in all). 4x4 2616->25 (one 1.3 MB panel, 5 workers) and ->36
        # (two, 10 workers) do the same work per worker, the second 1.25-1.35x slower. With
        # these the L1-spill term above fits ~80 GB/s, an L2 rate, instead of 34; the 1x1
        # model fits both to zero
        # (a 1x1 model counts each panel up to an L1's worth: :func:`conv_panel_floats`)
        panels[0] * conv_panel_floats(ocb * red, k1, m.cpu_l1_bytes),
        0.0 if k1 else panels[1] * ocb * red / m.cores,
        # unpack (unpack_by_block): a (channel block, row) task re-reads its packed row
        # (owp x ocb floats, channel stride ocb: a new line per load) once per channel; beyond
        # L1 those ocb sweeps miss (YOLO-V2's 416x416 3->32: 54 KB rows, ~25% slower)
        _cdiv(ocp * s.out_h, m.cores) * ocb * owp * _over_l1(owp * ocb * 4, m),
        # the pad pass again where it compiles to gathers (:func:`mirror.pad_gathered`: a copy
        # without zero padding, rows of the target's gathered widths; the sampled pass of a
        # 1x1 window at stride 2 where its rows are short). When 1x1 stride-2 convs still
        # copied the whole input, their rows of 17x17 224->160, 21x21 416->96 and 27x27
        # 288->488 ran a median 1.27x, 1.19x and 1.12x the model without it, 1.18x, 0.99x
        # and 1.0x with it (the kn model, whose convs all pad, fits it to 0)
        s.IC * hp * wp / m.cores * pad_gathered(s, hp, wp, m),
        # the bytes the call writes beyond the L2s, per core (a hinge, as the 1x1 GEMM's): calls
        # run back to back, so the part of the padded copy, the packed result and the output
        # past the L2s goes out to L3 and comes back in the next call. The unit is tied to the
        # elementwise model's streamed-byte unit (``ties.TIED_UNITS``). The training file's 47
        # direct-conv rows that write more than the L2s hold ran a median 1.07x the model
        # without it (60% within +-10%), 1.01x with it (72%). The input, read and never
        # written, stays out: counted in, held-out YOLO-V2 and POSENET lost 1.2 and 0.7 points
        # and the strata's stride-1 1x1 rows 9
        max(0, direct_written_bytes(s, hp * wp, ocp * ocb * s.out_h * owp) - _l2s_bytes(m))
        / m.cores,
    ]


CPU_GEMM_TERMS = ("fma", "panel_loads", "input_pack", "weight_pack", "unpack", "remote_panels",
                  "past_l2s")  # fmt: skip


def cpu_gemm(s: OpSpec, m: Machine) -> list[float]:
    """gemm-1x1: tasks (mr channels, nv*lanes pixels); work = IC x mr x nv vector FMAs per
    task and IC x nv input-panel loads; plus the input pack (padded pixels), weight pack
    (every call) and unpack passes, the panels a worker first fetches from the cores that
    packed them, and the call's passes beyond the L2s. (The accumulator init and write-back
    per task fitted to 0 beside the panel loads and is left out; so did a per-task cost
    beside the panel fetches.)"""
    c = conv_shape(s)
    v = m.variants
    mr, nv, run = tiling.gemm_plan(c, m, any(s.pad), v.cpu_gemm_rows, v.cpu_gemm_fit,
                                   v.cpu_gemm_in_place)
    np_ = nv * m.lanes
    pp, ocp = _cdiv(s.out_h * s.out_w, np_), _cdiv(s.OC, mr)
    waves = _cdiv(pp * ocp, m.cores)  # register tiles on the critical core
    passes = 1
    if run:  # in place: no input pack and no unpack pass; a task is a run of tiles
        passes, waves = 0, _cdiv(pp // run * ocp, m.cores) * run
    return [
        waves * s.IC * mr * nv,  # FMAs on the critical core
        # input-panel vector loads: every task streams its IC x np panel once, nv loads per
        # IC step whatever mr (x86 hot loop of mr=1: one broadcast + 3 vfmadd231ps mem,zmm per
        # IC step, 3 accumulator chains: latency- and load-bound, not FMA-bound). With 16
        # workers a gate at one L1 (IC >= 257) or half of one no longer fits the samples
        # (68.4 / 72.9% acc10 on the split, 82.6% ungated)
        waves * s.IC * nv,
        passes * s.IC * pp * np_ / m.cores,  # input pack
        # weight pack (unless prepacked); its unit is the 1x1 stride-2 direct conv's
        # (``ties.k1_weight_pack_us``)
        ocp * mr * s.IC / m.cores * _packs(m),
        passes * s.out_elems / m.cores,  # unpack
        # panels from other cores: the packs' parallel loops (o, k) and (po, k) leave each
        # panel's rows with the workers that wrote them; the busiest GEMM worker fetches
        # the rows of its chunk's distinct panels that it did not pack itself (13x13 1024->37:
        # 148 tasks in chunks of 10: 2 input panels of 48 pixels, 10 one-channel weight
        # panels; 0.69x the model with a per-task cost instead)
        gemm_remote_panel_floats(pp, ocp, s.IC, mr, np_, m.cores),
        # the call's passes beyond the L2s, per core (a hinge, as the pools'): calls run
        # back to back, so the part of one call's input, packed input, packed result and
        # output past the L2s streams from L3 again in the next. The unit is tied to the
        # elementwise model's streamed-byte unit (``ties.TIED_UNITS``): no 1x1 GEMM row of
        # the training file passes the L2s, while the random body and pointwise strata's
        # rows past them (up to 159 MiB) ran 1.2x their predictions. The weight is left
        # out: counted in, the deep stratum's weight-bound rows lost 10 points
        max(0, gemm_pass_bytes(s, pp * np_ * passes) - _l2s_bytes(m)) / m.cores,
    ]


CPU_WINOGRAD_TERMS = ("fma", "u_within_l2s", "input_transform", "weight_transform",
                      "output_transform", "weight_transform_streamed")  # fmt: skip


def cpu_winograd(s: OpSpec, m: Machine) -> list[float]:
    """winograd-2x2-3x3: 16 x OC blocks x tile blocks GEMM tasks of IC x pt x ocb/lanes
    vector FMAs; input, weight (every call) and output transforms as parallel passes. (The
    input transform's 16 stores per tile no longer conflict in one L1 set: the schedule skews
    V's planes, ``cpu_winograd.V_PLANE_SKEW_FLOATS``. The accumulator init + write-back per
    task fitted to 0 on the 16-worker samples and is left out.)"""
    c = conv_shape(s)
    ocb, pt = tiling.winograd_tiles(c, m, m.variants.cpu_even_tiles)
    th, tw = tiling.winograd_grid(c)
    pp, ocp, vecs = _cdiv(th * tw, pt), _cdiv(s.OC, ocb), ocb // m.lanes
    waves = _cdiv(16 * ocp * pp, m.cores)
    u_units = 16 * ocp * ocb * s.IC / m.cores
    l2s = _l2s_bytes(m)
    return [
        waves * s.IC * pt * vecs,  # FMAs on the critical core
        # U (16 x OC x IC floats) that fits the L2s of the cores/2 physical cores stays there
        # between its writers and readers: the weight transform's workers own (OC block, IC)
        # chunks of all 16 planes, the GEMM's 16 x OC-block x tile-block tasks fall to the 16
        # workers one plane each (static chunks of OC blocks x tile blocks tasks), so nearly
        # every U line moves core to core, modified, and back for the next call's stores (an
        # RFO that invalidates the reader's copy). The part of a larger U beyond the L2s goes
        # out to L3 between the two and streams at the plain rate: the extra is paid by the
        # share within the L2s (a step at 16 MiB instead, all or nothing, left YOLO-V2's
        # 13x13 x1024 rows, the only ones beyond, without any transform cost when held out:
        # 0.19-0.46x)
        min(16 * ocp * ocb * s.IC * 4, l2s) / 4 / m.cores,
        16 * s.IC * pp * pt / m.cores,  # pad + input transform
        u_units * _packs(m),  # weight transform (every call, unless prepacked)
        16 * ocp * ocb * th * tw / m.cores + s.out_elems / m.cores,  # output transform, unpack
        # (the weight vector loads of a task whose IC x ocb panel spills L1, as in cpu_conv,
        # fitted to 0.1 ns beside the U term and moved no +-10% outcome: left out)
        # the weight transform's pass beyond the L2s, per core: the part of U past them and
        # the 9/16 as many weight bytes it is made from stream from L3 at a plain pass's rate.
        # Its unit is not fitted but tied to the elementwise model's time per streamed byte
        # (``ties.TIED_UNITS``): only YOLO-V2's 13x13 x1024 rows of the training file have
        # U beyond the L2s, and held out the fit had no row to learn it from (0.43-0.81x)
        winograd_streamed_bytes(16 * ocp * ocb * s.IC * 4, l2s) / m.cores,
    ]


def cpu_depthwise(s: OpSpec, m: Machine) -> list[float]:
    """depthwise-direct: one task per block of output rows of a channel
    (:func:`codl_tvm.tiling.depthwise_rows`; one row where the kernel variant
    ``cpu_depthwise_blocks`` is off), output columns in SIMD lanes. A stride-2 input vector is
    gathered from ``lanes`` scalar loads and inserts (the compiled kernel's assembly: ~30
    instructions for 2), so strided window steps have their own unit time, unless the input is
    padded into column phases (``cpu_depthwise_phases``), where every step loads whole vectors;
    the padded input rows (each task's own, or one pass over the whole input), the output
    written out, and a fixed cost per task (its accumulator workspace, weight broadcasts, loop
    setup)."""
    blocks = m.variants.cpu_depthwise_blocks
    rows, tasks = depthwise_tasks(s, m)
    vx = _cdiv(s.out_w, m.lanes)
    waves = _cdiv(tasks, m.cores)
    hp, wp = padded_in(s, vx * m.lanes)
    pad_rows = (rows - 1) * s.SH + (s.KH - 1) * s.dilation + 1
    padded = tasks * pad_rows * wp if blocks else s.IC * hp * wp
    strided = s.SW > 1 and not m.variants.cpu_depthwise_phases
    return [
        waves * rows * vx * s.reduction * (not strided),
        waves * rows * vx * s.reduction * strided,
        waves * rows * vx,
        padded / m.cores,
        s.out_elems / m.cores,
        waves,
    ]
