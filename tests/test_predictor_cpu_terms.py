"""The CPU terms of the codl predictor: cache regimes, per-task costs, and what they buy.

``codl_tvm/predictor/blocking.py`` adds to the CPU kernels' waves-times-work terms:

- a *streamed* pass (pool, elementwise, GEMV weight) once its working set exceeds the L2s of
  the cores, priced per byte per core, 0 below;
- weight loads from L2 when a task's weight panel spills L1 (direct NCHWc, Winograd);
- a fixed cost per task wave (GEMV tasks);
- the pool's row loop as LLVM vectorizes it (short rows and remainders scalar), the
  depthwise kernel's stride-2 window steps (gathered input vectors) apart from stride 1.

The accuracy checks train on the shipped H100 samples and score against ``latency_us``; the
floors are a few points under what these terms reached when added (CPU rows re-measured in 5
rounds: split 60%, YOLO-V2 41%, VGG-16 58%, POSENET 49%) and above what the terms before the
pool/depthwise ones reached on the same rows (54%, 33%, 46%, 41%), so losing a term fails them.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

from codl_tvm import tiling
from codl_tvm.predictor import DATA_DIR, blocking, cpu_chunks, cpu_stream_terms, make
from codl_tvm.predictor.accuracy import split_models, split_rows
from codl_tvm.predictor.base import sub_spec
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.mirror import eltwise_gathered_passes, kernel
from codl_tvm.predictor.opspec import SHARING_KINDS, OpSpec
from codl_tvm.profiler import read_samples

M = reference()  # the H100 machine's CPU side: 16 cores, 16 lanes
# cpu_conv slots: unpack reads of others' tiles, weight panels (most, all), unpack beyond L1
UNPACK_REMOTE, PANELS, UNPACK_OVER_L1 = 7, slice(8, 10), 10
L2_TOTAL = M.cores // M.cpu_smt * M.cpu_l2_bytes_per_core


def op(kind: str, h: int, w: int, ic: int, oc: int, k: int = 1, s: int = 1) -> OpSpec:
    return OpSpec(kind, h, w, ic, oc, k, k, s, s, (0, 0, 0, 0), 1, 1)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return read_samples(DATA_DIR / "samples-x86-cuda-h100.csv")


def test_pool_streams_only_beyond_the_l2s() -> None:
    small = op("pool_max", 64, 64, 64, 64, 2, 2)  # 1 MB in
    big = op("pool_max", 256, 256, 128, 128, 2, 2)  # 32 MB in
    assert blocking.cpu_pool(small, M)[-1] == 0.0
    bytes_big = (big.IC * big.H * big.W + big.out_elems) * 4
    assert bytes_big > L2_TOTAL
    # a hinge: each core's L2 keeps its share of the static chunks, the excess streams
    assert blocking.cpu_pool(big, M)[-1] == pytest.approx((bytes_big - L2_TOTAL) / M.cores)


def test_eltwise_streams_past_the_l2s() -> None:
    per_pass = L2_TOTAL // 8  # elementwise: read + write of 4-byte elements
    below = op("elementwise", 1, per_pass // 64, 64, 64)
    above = op("elementwise", 2, per_pass // 64, 64, 64)
    assert blocking.cpu_eltwise(below, M)[2] == 0.0
    assert blocking.cpu_eltwise(above, M)[2] > 0.0


@pytest.mark.parametrize(("ow", "vector", "scalar"), [(13, 0, 13), (15, 0, 15), (16, 2, 0),
                                                      (438, 54, 6)])
def test_pool_rows_vectorize_as_llvm_does(ow: int, vector: int, scalar: int) -> None:
    """LLVM leaves a row loop of fewer than 16 iterations scalar (the 15x15 avg pools: 5x
    slower per output than wide rows) and runs the rest in 8-float vectors plus a scalar
    remainder (the compiled Sapphire Rapids kernels)."""
    s = op("pool_max", 2 * ow + 1, 2 * ow + 1, 64, 64, k=3, s=2)
    assert s.out_w == ow
    waves = math.ceil(s.OC * s.out_h / M.cores)
    terms = blocking.cpu_pool(s, M)
    assert terms[:2] == [waves * vector * 9, waves * scalar * 9]


@pytest.mark.parametrize(("ow", "vector", "scalar"), [(63, 8, 3), (27, 3, 3), (28, 4, 0),
                                                      (15, 0, 15)])
def test_pool_stride_one_remainders_run_four_wide(ow: int, vector: int, scalar: int) -> None:
    """At stride 1 LLVM runs the remainder past the 8-float vectors 4 wide (64x64 k2s1: 6 ymm
    + 3 xmm + 3 scalar outputs a row), at stride 2 it stays scalar (the test above)."""
    s = op("pool_max", ow + 1, ow + 1, 64, 64, k=2, s=1)
    waves = math.ceil(s.OC * s.out_h / M.cores)
    assert blocking.cpu_pool(s, M)[:2] == [waves * vector * 4, waves * scalar * 4]


@pytest.mark.parametrize(("w", "k", "st", "per_vector"), [(128, 2, 2, 0), (104, 2, 2, 2),
                                                         (367, 3, 2, 3), (64, 2, 1, 0),
                                                         (29, 3, 1, 9)])
def test_pool_int32_address_steps(w: int, k: int, st: int, per_vector: int) -> None:
    """Rows whose input width is not a power of two recompute each vector load's int32
    address (leal + movslq): once per window row at stride 2, once per window step at 1."""
    s = op("pool_max", w, w, 64, 64, k=k, s=st)
    waves = math.ceil(s.OC * s.out_h / M.cores)
    vec = s.out_w // 8 + (s.out_w % 8 // 4 if st == 1 else 0)
    assert blocking.cpu_pool(s, M)[3] == waves * vec * per_vector


def test_depthwise_stride_two_steps_have_their_own_unit() -> None:
    one, two = (blocking.cpu_depthwise(op("depthwise", 32, 32, 64, 64, k=3, s=st), M)
                for st in (1, 2))  # fmt: skip
    assert one[0] > 0 and one[1] == 0
    assert two[0] == 0 and two[1] > 0


def test_winograd_weight_transform_costs_more_within_the_l2s() -> None:
    """U (16 x OC x IC floats) within the L2s of cores/2 physical cores (16 MiB on 16 vCPUs)
    moves core to core between the weight transform and the GEMM: an extra unit time for the
    share of U within them. Regression: an all-or-nothing step at 16 MiB gave
    YOLO-V2's 13x13 x1024 layers (the only U beyond) no transform cost when YOLO-V2 was
    held out (0.19-0.46x)."""
    fits, out = op("conv2d", 14, 14, 512, 512, 3), op("conv2d", 13, 13, 1024, 1024, 3)
    for s in (fits, out):
        assert kernel("cpu", s, M).algorithm == "winograd-2x2-3x3"
    t = blocking.cpu_winograd(fits, M)
    assert t[1] == t[3] > 0.0  # 16 x 512 x 512 floats: 16 MiB, all within
    t = blocking.cpu_winograd(out, M)  # 64 MiB: a quarter within
    l2s = M.cores // M.cpu_smt * M.cpu_l2_bytes_per_core
    assert t[1] == pytest.approx(l2s / 4 / M.cores) and t[1] == pytest.approx(t[3] / 4)


def test_gemm_task_waves_are_the_mirrors_blocks() -> None:
    for h, w, ic, oc in [(13, 13, 512, 125), (26, 26, 256, 21), (1, 32, 64, 70)]:
        s = op("conv2d", h, w, ic, oc)
        k = kernel("cpu", s, M)
        assert k.algorithm == "gemm-1x1"
        mr, nv = tiling.gemm_tiles(s.conv_shape, M)
        waves = math.ceil(k.num_blocks / M.cores)
        assert blocking.cpu_gemm(s, M)[1] == waves * ic * nv


def test_cpu_terms_have_one_length_per_algorithm_and_are_nonnegative(rows) -> None:
    lengths: dict[str, set[int]] = {}
    for r in rows:
        if r["role"] != "cpu" or r["op"] in SHARING_KINDS:
            continue
        t = blocking.terms("cpu", sub_spec(r), M, r["algorithm"])
        assert min(t) >= 0.0, r
        lengths.setdefault(r["algorithm"], set()).add(len(t))
    assert all(len(v) == 1 for v in lengths.values()), lengths


def _acc10(train: list[dict], test: list[dict], role: str = "cpu") -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pred = make("codl").fit(train)
        test = [r for r in test if r["role"] == role and r["op"] not in SHARING_KINDS]
        p = pred.predict(test)
    y = np.array([r["latency_us"] for r in test])
    return float(np.mean(np.abs(p - y) / y <= 0.1))


def test_cpu_accuracy_on_the_held_out_split(rows) -> None:
    # 71.6%, then 75.9% (71.1% with the hard random 1x1 rows); with 16 workers, TVM's static
    # chunks and LLVM's code: 85.0%; with 1x1 stride-2 rows (58% of them): 80.4%, the rest
    # 85.55% as before (PREDICTOR.md has each step); with the 1x1 models' weight panels and
    # the bytes written past the L2s: 83.0%; floors 2-4 points under
    train, test = split_rows(rows, 0.3, 0)
    assert _acc10(train, test) >= 0.80
    assert _acc10(train, [r for r in test if r["model"] != "random-downsample"]) >= 0.82


@pytest.mark.parametrize(("model", "floor"),
                         [("YOLO-V2", 0.81), ("VGG-16", 0.88), ("POSENET", 0.86)])
def test_cpu_accuracy_on_held_out_cnns(rows, model: str, floor: float) -> None:
    # YOLO-V2: 78.6% before the tied Winograd unit (``ties.py``), 81.8% with it; 83.0% with
    # the weight-panel and written-bytes terms (VGG-16 90.6%, POSENET 87.7%)
    assert _acc10(*split_models(rows, [model])) >= floor


def test_gpu_accuracy_on_the_held_out_split(rows) -> None:
    # with Winograd FMAs per warp and GEMV ragged K: 80.3%; with pool bytes beyond half the
    # L2, launch floors and odd output planes outside split-K: 83.8%; with the random
    # 1x1 rows, nvcc's GEMV unrolling and the pools' DRAM share: 88.2%
    assert _acc10(*split_rows(rows, 0.3, 0), role="gpu") >= 0.84


@pytest.mark.parametrize(("model", "floor"),
                         [("YOLO-V2", 0.85), ("VGG-16", 0.91), ("POSENET", 0.87)])
def test_gpu_accuracy_on_held_out_cnns(rows, model: str, floor: float) -> None:
    assert _acc10(*split_models(rows, [model]), role="gpu") >= floor


def test_conv_unpack_rereads_only_rows_beyond_l1() -> None:
    """Regression: the unpack sweeps a packed row once per channel; YOLO-V2's
    416-wide 3->32 rows (54 KB) miss L1 and ran ~25% slower than the model said, VGG-16's
    224-wide ones (29 KB) do not."""
    wide = op("conv2d", 418, 418, 3, 32, k=3)
    narrow = op("conv2d", 226, 226, 3, 32, k=3)
    assert blocking.cpu_conv(wide, M)[UNPACK_OVER_L1] > 0.0
    assert blocking.cpu_conv(narrow, M)[UNPACK_OVER_L1] == 0.0


def test_gemv_pays_a_fork_join_only_for_several_tasks() -> None:
    """Regression: a parallel loop of one task compiles to serial code; GEMVs of
    14-41 tasks, which do pay the launch, sat at 0.72-0.84x."""
    one_task = op("dense", 1, 1, 256, 16)  # one column block
    many = op("dense", 1, 1, 4096, 1024)
    assert blocking.cpu_dense(one_task, M)[3] == 0.0
    assert blocking.cpu_dense(many, M)[3] == 1.0


def test_gemv_stlb_term_starts_past_the_tlb_reach() -> None:
    """Regression: GEMVs whose pass touches more 4 KiB pages than the STLB holds
    stream about 2x slower per byte on the H100 host (3342 x 831: 18 us/MB)."""
    reach_rows = M.cpu_stlb_entries  # rows of a full page each: one page a row
    assert blocking.cpu_dense(op("dense", 1, 1, reach_rows, 1024), M)[-1] == 0.0
    assert blocking.cpu_dense(op("dense", 1, 1, reach_rows + 1, 1024), M)[-1] > 0.0
    # narrow rows touch less than a page each: the same IC stays within reach
    assert blocking.cpu_dense(op("dense", 1, 1, 2 * reach_rows, 512), M)[-1] == 0.0


def test_gemv_rows_off_a_line_split_their_vector_loads() -> None:
    """Weight rows are 4*OC bytes apart: unless 16 | OC most rows start off a 64-byte line, so
    each 64-byte vfmadd231ps load of such a row is a cache-line split (4096 x 2867: rows 11468
    B apart, 15 in 16 off a line; 4096 x 1000: rows 4000 B apart, every other row)."""
    aligned, half, most = (blocking.cpu_dense(op("dense", 1, 1, 1024, n), M)[0]
                           for n in (1008, 1000, 1001))  # the same 31 column blocks
    assert half == 1.5 * aligned
    assert most == (1 + 15 / 16) * aligned


def test_gemv_stlb_visit_costs_its_walk_or_its_lines() -> None:
    """Past the STLB's reach a row visit costs the longer of its page walk (STLB_WALK_LINES
    line times) and its lines (4096..25088 x 2867: 17-20 ns a visit of 3 lines; x2048 and
    x4096: 4.0-4.3 ns a line of 8 or 16)."""
    t = blocking.cpu_dense(op("dense", 1, 1, 4096, 4096), M)
    assert t[-1] == t[0]  # aligned rows: 16 lines a visit, longer than the walk
    t = blocking.cpu_dense(op("dense", 1, 1, 4096, 2867), M)
    assert t[-1] == t[4] * 4096 * cpu_stream_terms.STLB_WALK_LINES  # 2 + 15/16 lines: the walk


def test_eltwise_reads_from_dram_only_past_the_last_level_cache() -> None:
    small = op("elementwise", 112, 112, 256, 256)  # 2 x 12.8 MB a pass
    huge = op("elementwise", 223, 223, 826, 826)  # 2 x 164 MB
    assert blocking.cpu_eltwise(small, M)[-1] == 0.0
    assert blocking.cpu_eltwise(huge, M)[-1] > 0.0


# ---- the streaming limit is learned per target ---------------------------------------------
def _streams(s: OpSpec, limit: int) -> bool:
    m = dataclasses.replace(reference(), cpu_stream_bytes=limit)
    return blocking.cpu_eltwise(s, m)[2] > 0.0


@pytest.mark.parametrize("limit_mb", [2, 6, 48])
def test_the_stream_limit_is_learned_from_the_samples(rows, limit_mb) -> None:
    """Latencies made by the model's own terms with a known limit: the fit finds a limit that
    puts every sample in the same regime (the exact value is only pinned where samples fall
    between two candidates)."""
    limit = limit_mb << 20
    elt = [dict(r) for r in rows if r["op"] == "elementwise" and r["role"] == "cpu"]
    # t0, per row-wave, per element, per streamed byte, per byte from DRAM
    unit_us = [2.0, 0.3, 0.002, 0.004, 0.004]
    truth = dataclasses.replace(reference(), cpu_stream_bytes=limit)
    for r in elt:
        r["latency_us"] = float(np.dot(unit_us, [1.0, *blocking.cpu_eltwise(sub_spec(r), truth)]))
    learned = make("codl").fit(elt).machine_.cpu_stream_bytes
    subs = [sub_spec(r) for r in elt]
    assert any(_streams(s, limit) for s in subs) and not all(_streams(s, limit) for s in subs)
    assert [_streams(s, learned) for s in subs] == [_streams(s, limit) for s in subs]


def test_a_fixed_stream_limit_is_kept_and_saved(rows, tmp_path) -> None:
    from codl_tvm.predictor import load

    cpu = [r for r in rows if r["role"] == "cpu" and r["op"] in ("elementwise", "pool_max")]
    fixed = make("codl", cpu_stream_bytes=3 << 20).fit(cpu)
    assert fixed.machine_.cpu_stream_bytes == 3 << 20
    fixed.save(tmp_path / "p.json")
    assert load(tmp_path / "p.json").machine_.cpu_stream_bytes == 3 << 20
    assert make("codl", cpu_stream_bytes=0).fit(cpu).machine_.cpu_stream_bytes == 0


def test_files_without_a_stream_limit_use_the_sapphire_rapids_rule(tmp_path) -> None:
    import json

    from codl_tvm.predictor import load

    shipped = DATA_DIR / "predictor-x86-cuda.json"
    doc = json.loads(shipped.read_text())
    # as written before the limit: a list of the first four facts, in format 3
    m = doc["model"]["machine"]
    doc["model"]["machine"] = [m["cores"], m["lanes"], m["sms"], m["l2_bytes"]]
    doc["version"] = 3
    (tmp_path / "old.json").write_text(json.dumps(doc))
    old, new = load(tmp_path / "old.json"), load(shipped)
    assert old.machine_.cpu_stream_bytes == 0  # the rule: L2s of 8 cores, 16 MB
    # learned from the samples: 16 MB (the 8 cores' L2s) with 16 workers and gradual pool
    # overflow; 24 MB before that term, 12 MB with 8 workers
    assert L2_TOTAL <= new.machine_.cpu_stream_bytes <= 2 * L2_TOTAL
    s = op("elementwise", 250, 250, 96, 96)  # 48 MB: streamed under both
    assert old.kernel_us("cpu", s) == pytest.approx(new.kernel_us("cpu", s))


def test_winograd_samples_have_no_plane_conflict_staircase(rows) -> None:
    """Regression: with the V planes skewed off the L1 set span, POSENET's
    32x32 256->128 H parts grow with their rows (the unskewed kernel: 535 / 820 / 664 / 1381 /
    893 us for 11 / 17 / 23 / 30 / 32 rows, the 17- and 30-row parts 1.5x slow)."""
    parts = sorted((r["sub_H"], r["latency_us"]) for r in rows
                   if r["role"] == "cpu" and r["algorithm"] == "winograd-2x2-3x3"
                   and (r["H"], r["IC"], r["OC"], r["dim"]) == (32, 256, 128, "H"))  # fmt: skip
    assert len(parts) >= 4
    us = [u for _, u in parts]
    assert all(b >= 0.9 * a for a, b in zip(us, us[1:], strict=False)), parts


@pytest.mark.parametrize(("k", "stride", "oc", "spills"), [
    (3, 2, 214, True),  # the random 47x47 34->214 k3 s2 op: 21 stack stores per (rc, ry) step
    (3, 1, 64, True),  # two-vector 14-column tiles of 3x3 convs
    (5, 2, 64, True),
    (2, 2, 64, False),  # k2: unrolled without reusing broadcasts
    (7, 1, 128, False),  # POSENET's k7: not unrolled at two vectors
    (3, 1, 16, False),  # one vector: registers to spare
    (4, 2, 16, True),  # one vector, stride 2, KW >= 4
])  # fmt: skip
def test_direct_conv_spills_where_the_assembly_does(k: int, stride: int, oc: int, spills: bool
                                                    ) -> None:
    """Regression: the hot loop's register spills, read off the Sapphire Rapids
    assembly of the direct kernel, set a per-(IC, KH)-step term; without it 47x47 34->214 k3s2
    ran at 0.85x the model and POSENET's k7 at 1.2-1.3x."""
    conv = OpSpec("conv2d", 47, 47, 34, oc, k, k, stride, stride, (k // 2,) * 4, 1, 1)
    assert kernel("cpu", conv, M).algorithm == "direct-nchwc"
    vecs = 2 if oc > M.lanes else 1
    xt = min((M.vector_regs - vecs - 2) // vecs, 14, conv.out_w)
    assert blocking.conv_spills(conv, M, vecs, xt) == spills
    assert (blocking.cpu_conv(conv, M)[1] > 0) == spills


@pytest.mark.parametrize(("w", "passes"), [(8, 0), (9, 2), (17, 2), (42, 2), (43, 1), (49, 1),
                                           (50, 0), (150, 0)])  # fmt: skip
def test_eltwise_rows_llvm_unrolls_are_gathered(w: int, passes: int) -> None:
    """Regression: LLVM fully unrolls a short elementwise row and vectorizes the
    row loop with gathers and scatters instead (assembly: 17-wide rows take 17 vgatherqps +
    vscatterqps per 8 rows); a fixed cost per wave had to stand in for it and put every
    50x50 row 1.3-1.57x over."""
    assert eltwise_gathered_passes(w, M) == passes
    t = blocking.cpu_eltwise(OpSpec("elementwise", w, w, 64, 64, 1, 1, 1, 1, (0,) * 4, 1, 1), M)
    assert (t[1] > 0) == (passes > 0)


def test_gemm_worker_fetches_the_panels_other_workers_packed() -> None:
    """Regression (16 TVM workers): the GEMM's parallel loop is (pixel tile, OC
    block) with the OC block innermost, statically chunked over the workers; the busiest
    worker fetches the rows of its chunk's panels that other workers packed (13x13 1024->37:
    148 tasks in chunks of 10, 0.69x the model with a per-task cost instead)."""
    # worker 3: tasks 30-39 = weight panels 30-36, 0-2 (packed by others: 10 x 1024 rows of
    # one channel) and pixel tiles 0-1 (it packed rows 768-1023 of tile 0: 1792 x 48 floats)
    assert cpu_chunks.gemm_remote_panel_floats(4, 37, 1024, 1, 48, 16) == 10 * 1024 + 1792 * 48
    # one pixel tile (13x1 1024->512, mr 16): each worker packed its own 2 weight panels
    assert cpu_chunks.gemm_remote_panel_floats(1, 32, 1024, 16, 16, 16) == (1024 - 64) * 16
    s = op("conv2d", 13, 13, 1024, 37)
    assert kernel("cpu", s, M).algorithm == "gemm-1x1"
    assert blocking.cpu_gemm(s, M)[-2] == 10 * 1024 + 1792 * 48


def test_direct_conv_fetch_counts_rows_per_core_pair() -> None:
    """Regression: TVM chunks the direct conv's parallel loop statically over
    16 workers; two adjacent workers (hyperthreads of one core) share an L2, so the input a
    core fetches is the rows its 2 x ceil(tasks/16) tasks touch, once (26x26 416->640 1x1:
    all 26 rows; per worker the 1x1 rows fitted 64.7% against 77.4%)."""
    from codl_tvm.predictor.cpu_chunks import conv_core_rows

    wide = op("conv2d", 26, 26, 416, 640, k=1)  # 20 channel blocks x 26 rows x 2 tiles
    assert conv_core_rows(wide, M, 2, 20 * 26 * 2) == 26
    tall = op("conv2d", 84, 84, 192, 64, k=1)  # 2 blocks x 84 rows x 6 tiles: 126 a core, 21 rows
    assert conv_core_rows(tall, M, 6, 2 * 84 * 6) == 21
    assert blocking.cpu_conv(wide, M)[1] == 26 * 416 * 28  # k1: the fetch, no spills


def test_direct_conv_unpack_and_panels_follow_the_static_chunks() -> None:
    """Regression: the conv's (channel block, row, column tile) tasks and the
    unpack's (channel block, row) tasks are chunked statically over the 16 workers, each loop
    on its own. Where the chunks disagree the unpack reads tiles another worker wrote (POSENET's
    27x256 3->64 row split: 801 of 1026 tiles, 1.27x the model without this; a one-block
    channel split lines up). Each worker first streams the weight panels its chunk spans,
    which the weight pack spread over all workers (POSENET 13x32 128->128 k7: 2 panels at
    most, 19 in all); the two rates are the core's and the shared L3's."""
    from codl_tvm.predictor.cpu_chunks import conv_core_panels, conv_unpack_remote_tiles

    assert conv_unpack_remote_tiles(2, 27, 19, 16) == 801
    assert conv_unpack_remote_tiles(1, 256, 19, 16) == 0
    first = op("conv2d", 29, 258, 3, 64, k=3)  # 27x256 out: 2 blocks x 27 rows x 19 tiles
    assert blocking.cpu_conv(first, M)[UNPACK_REMOTE] == 801 * 14 * 32 / 16
    k7 = op("conv2d", 19, 38, 128, 128, k=7)  # 13x32 out: 4 blocks x 13 rows x 3 tiles
    assert conv_core_panels(4, 13 * 3, 16) == (2, 16 + 3)  # chunks of 10 cross 3 blocks' ends
    assert blocking.cpu_conv(k7, M)[PANELS] == [2 * 32 * 128 * 49, 19 * 32 * 128 * 49 / 16]
    # a 1x1 model counts the busiest worker's panels up to an L1 each, and not the sum
    wide = op("conv2d", 26, 26, 416, 640)  # 20 blocks x 26 rows x 2 tiles: chunks of 65
    assert conv_core_panels(20, 26 * 2, 16) == (2, 32)  # every chunk crosses one block's end
    assert blocking.cpu_conv(wide, M)[PANELS] == [2 * (48 << 10) / 4, 0.0]
