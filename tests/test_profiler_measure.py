"""Real profiling of tiny kernels: locally, over a real TVM RPC server, and via a bundle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codl_tvm.device import DevicePair
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.profiler import profile, read_samples, space
from codl_tvm.profiler.bundle import build_bundle

SPECS = [
    OpSpec("conv2d", 9, 9, 4, 8, 3, 3, 2, 2, (1, 1, 1, 1)),
    OpSpec("depthwise", 7, 7, 8, 8, 3, 3, 1, 1, (1, 1, 1, 1), groups=8),
    OpSpec("dense", 1, 1, 64, 40),
    OpSpec("pool_max", 8, 8, 4, 4, 2, 2, 2, 2),
    OpSpec("pool_avg", 6, 6, 4, 4, 3, 3, 1, 1, (1, 1, 1, 1)),
    OpSpec("elementwise", 5, 5, 3, 3),
]
RUNNER = Path(__file__).parents[1] / "codl_tvm" / "profiler" / "bundle_runner.py"


def tiny_jobs(grid=(0.3, 1.0)):
    return space.compute_jobs(SPECS, grid) + space.sharing_jobs(2, 1 << 15)


def _check_rows(rows, jobs, pair="cpu-pair"):
    assert len(rows) == len(jobs)
    assert {r["pair"] for r in rows} == {pair}
    assert all(r["latency_us"] > 0 and r["repeat"] >= 1 for r in rows)
    ops = {r["op"] for r in rows}
    assert ops == {s.kind for s in SPECS} | {j.op for j in jobs if j.model == "sharing"}
    assert {"to_cpu", "to_gpu", "slice", "concat", "sync"} <= ops
    assert {r["role"] for r in rows} == {"gpu", "cpu"}


@pytest.mark.slow  # real builds with the project's schedules: ~10-25 s
def test_local_profile_and_resume(tmp_path):
    out = tmp_path / "s.csv"
    jobs = tiny_jobs()
    counts = profile("cpu-pair", out, jobs=jobs, progress=False)
    assert counts == {"measured": len(jobs), "resumed": 0}
    rows = read_samples(out, pair="cpu-pair")
    _check_rows(rows, jobs)
    # every compute row ran the sub-op its split says
    for r in rows:
        if r["op"] in ("conv2d", "pool_max") and r["dim"] == "H":
            sub = OpSpec.part(
                next(s for s in SPECS if s.kind == r["op"]), r["role"], "H", r["ratio"]
            )
            assert r["sub_H"] == sub.H and r["sub_out"] == sub.out_elems
    more = space.compute_jobs(SPECS, (0.6,))
    again = profile("cpu-pair", out, jobs=jobs + more, progress=False)
    assert again == {"measured": len(more), "resumed": len(jobs)}


def test_profile_refuses_another_pairs_file(tmp_path):
    out = tmp_path / "s.csv"
    profile("cpu-pair", out, jobs=tiny_jobs()[:2], progress=False)
    text = out.read_text().replace("cpu-pair", "android-opencl")
    out.write_text(text)
    with pytest.raises(ValueError, match="android-opencl"):
        profile("cpu-pair", out, jobs=tiny_jobs()[:3], progress=False)


@pytest.mark.slow  # real builds with the project's schedules: ~10-25 s
def test_rpc_profile_on_localhost(tmp_path):
    from tvm import rpc

    server = rpc.Server(host="127.0.0.1", port=9190, port_end=9290)
    try:
        jobs = tiny_jobs()
        out = tmp_path / "rpc.csv"
        counts = profile("cpu-pair", out, jobs=jobs, rpc=f"127.0.0.1:{server.port}", progress=False)
        # over RPC a block copy is not timed (the planner prices it as the slice kernel)
        jobs = [j for j in jobs if j.op != "copy_gpu"]
        assert counts["measured"] == len(jobs)
        _check_rows(read_samples(out), jobs)
    finally:  # Server.terminate needs psutil; end the server process we started by its id
        server.proc._proc.kill()


@pytest.mark.slow  # real builds with the project's schedules: ~10-25 s
def test_bundle_runs_runtime_only(tmp_path):
    jobs = tiny_jobs()
    man = build_bundle(DevicePair.preset("cpu-pair"), jobs, tmp_path / "b", progress=False)
    assert not (tmp_path / "b.partial").exists()
    assert sum(len(lib["entries"]) for lib in man["libs"]) == len(jobs)
    out = tmp_path / "b.csv"
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", PYTHONPATH="")
    cmd = [sys.executable, str(RUNNER), str(tmp_path / "b"), "-o", str(out)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    _check_rows(read_samples(out), jobs)
    assert json.loads((tmp_path / "b.machine.json").read_text())["cpu_logical"] >= 1
    cores = man["pair"]["cpu"]["num-cores"]
    assert f"TVM CPU pool: {cores} workers" in res.stdout  # TVM alone: half the CPUs on x86
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert f'"resumed": {len(jobs)}' in res.stdout


def test_cuda_bundle_compiles_here(tmp_path):
    pair = DevicePair.preset("x86-cuda", arch="sm_90")
    jobs = space.compute_jobs(SPECS[:3], (0.5,)) + space.sharing_jobs(1, 1 << 14)
    man = build_bundle(pair, jobs, tmp_path / "cuda", progress=False)
    assert man["cuda_arch"] == "sm_90"
    gpu = [e["row"] for lib in man["libs"] if lib["role"] == "gpu" for e in lib["entries"]]
    kinds = {r["op"]: r["algorithm"] for r in gpu}
    assert kinds["slice"] == "copy" and kinds["conv2d"] != "copy", kinds
    # GPU kernels are cut in blocks of a fixed size over the H100's 132 SMs
    assert all(r["block"] > 0 and r["unit"] >= 1 and r["cores"] == 132 for r in gpu
               if r["algorithm"] != "copy")  # fmt: skip
    assert [lib["devices"] for lib in man["libs"] if lib["role"] == "gpu"][0] == [
        ["cuda", 0],
        ["cpu", 0],
    ]
    # copies are timed as the artifacts run them (staged, between tensors made once): no
    # library, the GPU first and the CPU second, each copy's source where its row says
    copies = [lib for lib in man["libs"] if lib["role"] is None]
    assert [lib["file"] for lib in copies] == [None]
    assert copies[0]["devices"] == [["cuda", 0], ["cpu", 0]]
    src = {e["row"]["op"]: e["input_devices"] for e in copies[0]["entries"]}
    assert src["to_gpu"] == [1] and src["to_cpu"] == [0]
    assert not any(p.name.endswith(".so") and p.stat().st_size == 0
                   for p in (tmp_path / "cuda").iterdir())
