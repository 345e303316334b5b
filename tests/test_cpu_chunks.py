"""The CPU's part of a row split in chunks, each uploaded while the next computes.

On the CPU pair the copies are host copies, so these tests check the answers (equal to the
unsplit model on awkward shapes), the VM code's order (each chunk's rows go into the output
right after the chunk), the cut (``row_chunks``) and that the planner and ``explain`` price
what the partition pass builds. On a CUDA GPU the same code runs the copies on the copy
engines (``benchmarks/coexec_conv.py``'s ``/one-chunk`` twins).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_stage_cross_device_copies import conv_model, extern_calls, rel_err
from tvm import relax

import codl_tvm
from codl_tvm import Plan, geometry
from codl_tvm.geometry import MIN_CHUNK_BYTES, MIN_CHUNK_ROWS, row_chunks
from codl_tvm.planner.costs import AnalyticCosts, BlockCopyCosts
from codl_tvm.planner.nodes import OpNode
from codl_tvm.planner.search import Evaluator
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.predictor.split_sharing import cpu_chunk_specs, pipelined_us, spec_parts
from codl_tvm.streams import COPY_BLOCK

PAIR = codl_tvm.DevicePair.preset("cpu-pair")


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of any size (the default wants 1 MiB of output each): the machinery on models
    small enough to build in a test."""
    monkeypatch.setattr(geometry, "MIN_CHUNK_BYTES", 1)


@given(first=st.integers(0, 50), rows=st.integers(1, 60), most=st.integers(1, 6),
       row_kib=st.sampled_from([1, 64, 256, 1024]))
def test_row_chunks_cover_the_rows_in_near_equal_runs(first, rows, most, row_kib):
    chunks = row_chunks(first, first + rows, most, row_kib * 1024)
    assert chunks[0][0] == first and chunks[-1][1] == first + rows
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
    sizes = [b - a for a, b in chunks]
    assert len(chunks) <= most and max(sizes) - min(sizes) <= 1
    assert len(chunks) == 1 or min(sizes) >= MIN_CHUNK_ROWS
    assert len(chunks) == 1 or min(sizes) * row_kib * 1024 >= MIN_CHUNK_BYTES


def test_small_uploads_stay_in_one_piece():
    # 16 channels x 21 columns of output per row: far below a chunk's worth of bytes
    mod = conv_model(8, 16, 20, 3, 1, 1)
    exe = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "H", 0.3), overlap=True,
                           block_copies=True, cpu_chunks=3)
    assert len([s for s in exe.manifest["staging"] if s["role"] == "cpu"]) == 2


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k=st.sampled_from([1, 3, 5]), stride=st.sampled_from([1, 2]),
       depthwise=st.booleans(), h=st.integers(9, 24), ratio=st.sampled_from([0.1, 0.3, 0.6]),
       chunks=st.integers(2, 4), blocks=st.booleans())
def test_a_chunked_split_equals_the_unsplit_model(small_chunks, k, stride, depthwise, h, ratio,
                                                  chunks, blocks):
    c = 8
    mod = conv_model(c, c if depthwise else 12, h, k, stride, c if depthwise else 1)
    x = np.random.default_rng(h).standard_normal((1, c, h, h + 1)).astype("float32")
    ref = codl_tvm.compile(mod, PAIR).run({"x": x})[0]
    exe = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "H", ratio), overlap=True,
                           block_copies=blocks, cpu_chunks=chunks)
    assert exe.manifest["cpu_chunks"] == chunks
    assert rel_err(exe.run({"x": x})[0], ref) <= 1e-5


def test_each_chunk_goes_into_the_output_right_after_it_is_computed(small_chunks):
    mod = conv_model(8, 16, 20, 3, 1, 1)
    exe = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "H", 0.3), overlap=True,
                           block_copies=True, cpu_chunks=3)
    order = []
    relax.analysis.post_order_visit(exe.mod["main"], lambda e: order.append(
        "cpu" if e.op.name_hint.endswith("_d1") else "gpu") if isinstance(e, relax.Call)
        and isinstance(e.op, tvm.ir.GlobalVar) else order.append("copy") if (
            isinstance(e, relax.Call) and isinstance(e.op, relax.ExternFunc)
            and e.op.global_symbol == COPY_BLOCK) else None)
    # 14 CPU rows in three chunks: three copies of their rows to the CPU, the GPU part, then
    # each chunk and its copy into the output; no concat kernel is left. A chunk reads a
    # halo row on each side, the last one none below (the conv's own padding)
    assert order == ["copy"] * 3 + ["gpu"] + ["cpu", "copy"] * 3
    assert [s["shape"][2] for s in exe.manifest["staging"] if s["role"] == "cpu"] == [
        6, 7, 6, 4, 5, 5]
    assert "concatenate" not in " ".join(str(gv) for gv in exe.mod.functions)


def test_one_chunk_builds_what_the_unchunked_pass_built():
    mod = conv_model(8, 16, 20, 3, 1, 1)
    plan = Plan.uniform(mod, "H", 0.3)
    whole = codl_tvm.compile(mod, PAIR, plan, overlap=True, block_copies=True, cpu_chunks=1)
    assert extern_calls(whole).count(COPY_BLOCK) == 2
    cuda = codl_tvm.DevicePair.preset("x86-cuda", arch="sm_90")
    assert PAIR.cpu_chunks == 1 and cuda.cpu_chunks > 1
    with pytest.raises(ValueError, match="cpu_chunks"):
        codl_tvm.compile(mod, PAIR, plan, cpu_chunks=0)


def test_the_planner_prices_the_chunks_the_pass_cuts(small_chunks):
    spec = OpSpec("conv2d", 20, 21, 8, 16, 3, 3, pad=(1, 1, 1, 1))
    cpu = spec_parts([spec], "H", 0.3)["cpu"]
    chunks = cpu_chunk_specs(cpu, 3)
    # the same input rows as the partition pass's staging buffers above
    assert [c[0].H for c in chunks] == [6, 7, 6]
    assert [c[0].out_h for c in chunks] == [4, 5, 5]
    assert sum(c[0].out_h for c in chunks) == cpu[0].out_h
    assert cpu_chunk_specs(cpu, 1) == [cpu]


def test_pipelined_uploads_hide_behind_the_next_chunk():
    assert pipelined_us([10, 10], [4, 4]) == 24  # compute-bound: the last upload shows
    assert pipelined_us([2, 2], [10, 10]) == 22  # copy-bound: the uploads queue
    assert pipelined_us([20], [8]) == 28


def test_a_chunked_unit_costs_less_where_its_uploads_are_large():
    spec = OpSpec("conv2d", 256, 256, 16, 64, 3, 3, pad=(1, 1, 1, 1))
    node = OpNode("conv2d_0", "conv2d", spec, 0, [1, 16, 256, 256], [1, 64, 256, 256],
                  64 * 16 * 9 * 4, dims=("H", "OC"))
    slow_bus = AnalyticCosts(cpu_gflops=50.0, gpu_gflops=100.0, copy_gbps=2.0)

    class Whole(BlockCopyCosts):
        cpu_chunks = 1

    chunked = Evaluator(BlockCopyCosts(slow_bus), [node]).unit([node], "H", 0.6)
    whole = Evaluator(Whole(slow_bus), [node]).unit([node], "H", 0.6)
    assert chunked.total_us < whole.total_us
    assert chunked.cpu_us >= whole.cpu_us  # one more launch per chunk


def test_cli_takes_the_chunk_count_and_refuses_a_bad_one(tmp_path, capsys):
    from codl_tvm.cli import main

    out = tmp_path / "a"
    assert main(["compile", "tiny-cnn", "--pair", "cpu-pair", "--cpu-chunks", "0",
                 "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--cpu-chunks must be at least 1" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert main(["compile", "tiny-cnn", "--pair", "cpu-pair", "--cpu-chunks", "3",
                 "-o", str(out)]) == 0
    assert json.loads((out / "manifest.json").read_text())["cpu_chunks"] == 3


def test_explain_says_which_cpu_parts_run_in_chunks(small_chunks):
    from codl_tvm.explain import explain

    mod = conv_model(8, 16, 20, 3, 1, 1)
    plan = Plan.uniform(mod, "H", 0.3)
    chunked = explain(mod, plan, BlockCopyCosts(AnalyticCosts())).rows[0]
    whole = explain(mod, plan, AnalyticCosts()).rows[0]  # no overlap: no chunks
    assert chunked["cpu"] == "rows 6-19 in 2 chunks" and whole["cpu"] == "rows 6-19"


def test_plans_price_the_chunks_compile_is_told_to_cut(capsys):
    from codl_tvm.cli import main
    from codl_tvm.planner.api import for_pair

    cuda = codl_tvm.DevicePair.preset("x86-cuda", arch="sm_90")
    spec = OpSpec("conv2d", 256, 256, 16, 64, 3, 3, pad=(1, 1, 1, 1))
    node = OpNode("conv2d_0", "conv2d", spec, 0, [1, 16, 256, 256], [1, 64, 256, 256],
                  64 * 16 * 9 * 4, dims=("H", "OC"))
    slow_bus = AnalyticCosts(cpu_gflops=50.0, gpu_gflops=100.0, copy_gbps=2.0)
    one = for_pair(slow_bus, cuda, cpu_chunks=1)
    assert one.cpu_chunks == 1 and one.in_model(1 << 30).cpu_chunks == 1
    assert for_pair(slow_bus, cuda).cpu_chunks == cuda.cpu_chunks
    whole = Evaluator(one, [node]).unit([node], "H", 0.6)
    chunked = Evaluator(for_pair(slow_bus, cuda), [node]).unit([node], "H", 0.6)
    assert chunked.total_us < whole.total_us
    with pytest.raises(ValueError, match="cpu_chunks"):
        for_pair(slow_bus, cuda, cpu_chunks=0)
    assert main(["plan", "tiny-cnn", "--pair", "cpu-pair", "--cpu-chunks", "0",
                 "-o", "never.json"]) == 1
    assert "--cpu-chunks must be at least 1" in capsys.readouterr().err
