"""The predictor's mirror of the dispatch table agrees with the kernels codl-tvm really builds.

For sub-ops of workload convs (H parts with one and odd rows, OC parts not a multiple of any
block, 1x1, 3x3 s1, stride 2) the real legalized PrimFunc is scheduled for the x86-cuda pair
(llvm Sapphire Rapids 16 cores, cuda sm_90) and its recorded ``Blocking`` is compared with
what :func:`codl_tvm.predictor.mirror.kernel` computes from the OpSpec alone, with the GPU
Winograd rule on (its default: 3x3 s1 IC >= 32 parts run it) and off (they run the tiled conv).
The Winograd kernel's four launch grids are also read back from the scheduled IR.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import tvm

from codl_tvm import tiling
from codl_tvm.predictor import OpSpec, make, mirror
from codl_tvm.predictor.blocking import terms
from codl_tvm.predictor.codl import AlgorithmFallbackWarning
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.mirror import kernel
from codl_tvm.profiler import space
from codl_tvm.schedules import blocking_of
from codl_tvm.schedules import testing as T
from codl_tvm.schedules.analysis import Conv2DInfo
from codl_tvm.schedules.cpu_conv import conv_tiles
from codl_tvm.schedules.gpu_conv import kernel_grids
from codl_tvm.schedules.target_info import TargetInfo
from codl_tvm.tiling import KernelVariants

CPU = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16}
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm"})
TARGETS = {"cpu": CPU, "gpu": CUDA}
MACHINE = dataclasses.replace(reference(), cores=16, lanes=16, sms=132)
DEFAULT_VARIANTS = KernelVariants()
WORKLOADS = Path("/work/shared/workloads/conv2d.csv")
REPO = Path(__file__).resolve().parent.parent


def _func(s: OpSpec):
    if s.kind in ("conv2d", "depthwise"):
        attrs = dict(strides=(s.SH, s.SW), padding=s.pad, dilation=(s.dilation,) * 2,
                     groups=s.groups)  # fmt: skip
        return T.conv2d_func((1, s.IC, s.H, s.W), (s.OC, s.IC // s.groups, s.KH, s.KW), **attrs)
    if s.kind == "dense":
        return T.matmul_func(1, s.IC, s.OC)
    kind = "max" if s.kind == "pool_max" else "avg"
    return T.pool2d_func((1, s.IC, s.H, s.W), kind, pool_size=(s.KH, s.KW),
                         strides=(s.SH, s.SW), padding=s.pad)  # fmt: skip


def _parts(op: OpSpec, splits: list[tuple[str, float]]) -> list[OpSpec]:
    out = []
    for dim, ratio in splits:
        if dim == "H" and op.kind == "dense":  # one output row
            continue
        for role in ("gpu", "cpu"):
            part = op.part(role, dim, ratio)
            if part is not None:
                out.append(part)
    return out


def _one_row(op: OpSpec) -> float:
    """A ratio that gives the GPU exactly one output row."""
    return 0.9 / op.out_h


def _cases() -> list[OpSpec]:
    ops = [s for _, s in space.workload_specs(WORKLOADS)] if WORKLOADS.is_file() else []
    ops = ops[::5]  # every 5th workload conv: all CNNs of the file, a few seconds
    subs = []
    for op in ops:
        subs += _parts(op, [("H", _one_row(op)), ("OC", 0.37)])
    hand = [  # awkward shapes: odd rows/columns, OC not a multiple of any tile, strides, 1x1
        OpSpec("conv2d", 13, 13, 512, 125, 1, 1),  # gemm-1x1 (OC 125)
        OpSpec("conv2d", 26, 26, 256, 256, 1, 1),  # gemm: every stride-1 1x1
        OpSpec("conv2d", 32, 32, 128, 128, 1, 1),  # gemm
        OpSpec("conv2d", 15, 15, 64, 96, 1, 1, 2, 2),  # 1x1 stride 2: direct
        OpSpec("conv2d", 13, 13, 1024, 1024, 3, 3, pad=(1, 1, 1, 1)),  # winograd / split-K
        OpSpec("conv2d", 26, 26, 64, 64, 3, 3, pad=(1, 1, 1, 1)),  # 64 to 64: winograd_64x64
        OpSpec("conv2d", 26, 26, 32, 64, 3, 3, pad=(1, 1, 1, 1)),  # too few channels: direct
        OpSpec("conv2d", 7, 13, 32, 70, 3, 3, pad=(0, 1, 1, 1)),  # GPU winograd: IC = MIN_IC
        OpSpec("conv2d", 9, 9, 31, 64, 3, 3, pad=(1, 1, 1, 1)),  # IC = 31: no GPU winograd
        OpSpec("conv2d", 56, 56, 256, 8, 3, 3, pad=(1, 1, 1, 1)),  # winograd, OC of 8
        OpSpec("conv2d", 27, 19, 96, 200, 3, 3, 2, 2, pad=(1, 1, 1, 1)),  # stride 2
        OpSpec("conv2d", 64, 64, 32, 3, 9, 9, pad=(4, 4, 4, 4)),  # RGB output: thin-oc
        OpSpec("conv2d", 7, 7, 2048, 33, 1, 1),  # narrow OC
        OpSpec("conv2d", 40, 50, 16, 300, 5, 5, pad=(2, 2, 2, 2)),  # 5x5
        OpSpec("depthwise", 28, 28, 96, 96, 3, 3, pad=(1, 1, 1, 1), groups=96),
        OpSpec("conv2d", 14, 14, 64, 128, 3, 3, pad=(1, 1, 1, 1), groups=4),  # grouped
        OpSpec("pool_max", 27, 27, 64, 64, 3, 3, 2, 2),
        OpSpec("pool_avg", 7, 7, 512, 512, 7, 7),  # global: GPU reduction, one block a channel
        OpSpec("pool_max", 5, 5, 64, 64, 5, 5),  # 1x1 output, window 25 < 32: thread per output
        OpSpec("dense", 1, 1, 1000, 70),
    ]
    for op in hand:
        subs.append(op)
        subs += _parts(op, [("H", _one_row(op)), ("H", 0.5), ("OC", 0.3)])
    return subs


def _agree(family: str, s: OpSpec, variants: KernelVariants = DEFAULT_VARIANTS) -> list[str]:
    """The kernel built with ``variants`` (compile options) against the mirror's on a machine
    whose samples were built with them."""
    with tiling.use_variants(variants):
        func = T.schedule(_func(s), TARGETS[family])
    got = blocking_of(func)
    want = kernel(family, s, dataclasses.replace(MACHINE, variants=variants))
    diffs = []
    if (got.algorithm, got.num_blocks) != (want.algorithm, want.num_blocks):
        diffs.append(f"{got.algorithm}/{got.num_blocks} != {want.algorithm}/{want.num_blocks}")
    if got.algorithm.startswith("gpu-conv-tiled"):
        seen = (got.grid["blockIdx.z"], got.grid.get("sum.blockIdx.x", 0))
        if seen != (want.split, want.sum_blocks):
            diffs.append(f"split/sum {seen} != {(want.split, want.sum_blocks)}")
    if got.algorithm == "gpu-winograd-2x2-3x3" == want.algorithm:
        diffs += _winograd_grids(func, got.grid, dict(want.grid))
    return [f"{family} {s}: {d}" for d in diffs]


def _winograd_grids(func, recorded: dict[str, int], mirrored: dict[str, int]) -> list[str]:
    """The mirror's grid against the recorded one and the launches of the scheduled IR
    (program order: weight transform, input transform, batched GEMM, output transform)."""
    diffs = [] if recorded == mirrored else [f"grid {recorded} != {mirrored}"]
    sub = {key: {k.split(".", 1)[1]: v for k, v in mirrored.items() if k.startswith(f"{key}.")}
           for key in ("u", "v", "y")}  # fmt: skip
    gemm = {k: v for k, v in mirrored.items() if k.startswith(("blockIdx", "threadIdx"))}
    seen = kernel_grids(func)
    if seen != [sub["u"], sub["v"], gemm, sub["y"]]:
        diffs.append(f"IR grids {seen} != {mirrored}")
    return diffs


@pytest.fixture(scope="module")
def cases() -> list[OpSpec]:
    return _cases()


def test_mirror_matches_scheduled_kernels(cases):
    assert len(cases) >= 60
    bad = [d for s in cases for fam in ("cpu", "gpu") for d in _agree(fam, s)]
    assert not bad, "\n".join(bad[:20])
    # the grid reaches every conv kernel of the dispatch table
    algos = {kernel(f, s, MACHINE).algorithm for s in cases for f in ("cpu", "gpu")}
    assert {"gemm-1x1", "winograd-2x2-3x3", "direct-nchwc", "direct", "gpu-conv-tiled",
            "gpu-winograd-2x2-3x3"} <= algos  # fmt: skip
    wino = [s for s in cases if kernel("gpu", s, MACHINE).algorithm == "gpu-winograd-2x2-3x3"]
    assert len(wino) >= 10 and any(s.out_h == 1 for s in wino)


NO_WINOGRAD = KernelVariants(gpu_winograd=False)


def test_mirror_matches_without_gpu_winograd(cases):
    """``gpu_winograd=False``: the 3x3 s1 IC >= 32 parts go back to the tiled conv."""
    three = [s for s in cases if mirror.is_dense_conv(s)
             and tiling.gpu_winograd_wins(mirror.conv_shape(s), enabled=True)]  # fmt: skip
    bad = [d for s in three for d in _agree("gpu", s, NO_WINOGRAD)]
    assert not bad, "\n".join(bad[:20])
    off = dataclasses.replace(MACHINE, variants=NO_WINOGRAD)
    algos = {kernel("gpu", s, off).algorithm for s in three}
    assert {"gpu-conv-tiled", "gpu-conv-tiled-split-k"} <= algos


def test_mirror_follows_the_gpu_variant():
    s = OpSpec("conv2d", 13, 13, 1024, 512, 3, 3, pad=(1, 1, 1, 1))

    def on(**v):
        return dataclasses.replace(MACHINE, variants=KernelVariants(**v))

    for variant in ("tiled-nosplitk", "dlight"):  # the Winograd rule ignores the tile variant
        assert kernel("gpu", s, on(gpu_conv=variant)).algorithm == "gpu-winograd-2x2-3x3"
        assert _agree("gpu", s, KernelVariants(gpu_conv=variant)) == []
    # the tiled rule's own variants
    nosplit = KernelVariants(gpu_conv="tiled-nosplitk", gpu_winograd=False)
    assert kernel("gpu", s, on(**nosplit.to_json())).algorithm == "gpu-conv-tiled"
    assert _agree("gpu", s, nosplit) == []
    dlight = KernelVariants(gpu_conv="dlight", gpu_winograd=False)
    for op in (s, OpSpec("conv2d", 56, 56, 64, 128, 1, 1), OpSpec("conv2d", 7, 9, 9, 70, 3, 3)):
        assert kernel("gpu", op, on(**dlight.to_json())).algorithm == "implicit-gemm"
        assert _agree("gpu", op, dlight) == []  # DLight Matmul: 64 OC x 32 pixels per block


@pytest.mark.parametrize("lanes, regs", [(16, 32), (8, 16), (4, 16)])  # Machine: regs of lanes
def test_pure_direct_tiles_equal_the_schedule(lanes, regs):
    for oc in (1, 3, 8, 16, 17, 32, 33, 125):
        for ow in (1, 2, 7, 13, 14, 15, 52):
            c = Conv2DInfo(1, 8, 9, ow, oc, 8, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0), 9, ow)
            info = TargetInfo("cpu", "llvm", lanes, regs, 16, 1)
            m = dataclasses.replace(reference(), lanes=lanes)
            assert tiling.direct_tiles(c, m) == conv_tiles(c, info)


def test_predictor_imports_no_tvm():
    code = "import sys, codl_tvm.predictor; print(sum(m.startswith('tvm') for m in sys.modules))"
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip() == "0"


def _rows_with_new_labels() -> list[dict]:
    """x86-cuda-like rows labelled as the profiler labels them (the schedules' algorithm),
    latencies from known unit times on the mirror's own terms."""
    specs = space.sample_specs(60, 1, max_flops=2e9, kinds=["conv2d", "pool_max", "dense"])
    rows = []
    for job in space.compute_jobs(specs, (0.3, 0.7, 1.0)):
        fam = job.role
        k = kernel(fam, job.sub, MACHINE)
        x = terms(fam, job.sub, MACHINE)
        unit = 0.003 if fam == "cpu" else 0.0007
        target = CPU if fam == "cpu" else {"kind": "cuda", "arch": "sm_90"}
        row = job.row("x86-cuda", target)
        row.update(algorithm=k.algorithm, block=1, unit=16 if fam == "cpu" else 32,
                   cores=16 if fam == "cpu" else 132, spread_us=0.0, repeat=3,
                   latency_us=5.0 + unit * sum(x[1:]))  # fmt: skip
        rows.append(row)
    return rows


def test_training_on_new_labels_keys_the_models_prediction_uses():
    rows = _rows_with_new_labels()
    labels = {r["algorithm"] for r in rows}
    assert {"gemm-1x1", "gpu-conv-tiled", "direct-nchwc"} <= labels
    p = make("codl").fit(rows)
    assert any("/gemm-1x1" in k for k in p.t_) and any("gpu-conv-tiled/" in k for k in p.t_)
    assert not any("split-k" in k for k in p.t_)  # split-K shares the tiled model
    with warnings.catch_warnings():
        warnings.simplefilter("error", AlgorithmFallbackWarning)
        for r in rows:  # predict_op's path (no algorithm given) = the rows' labels
            sub = p._key(r["role"], make_sub(r), None)
            assert sub == p._key(r["role"], make_sub(r), r["algorithm"])
            assert sub in p.t_
    got = p.predict(rows)
    want = np.array([r["latency_us"] for r in rows])
    assert np.median(np.abs(got / want - 1)) < 0.02


def make_sub(row: dict) -> OpSpec:
    from codl_tvm.predictor.base import sub_spec

    return sub_spec(row)


def test_old_predictor_files_load_and_warn_once_per_missing_kernel(tmp_path):
    from pathlib import Path

    from codl_tvm.predictor import load

    # the H100 predictor shipped before model keys named algorithms
    p = load(Path(__file__).parent / "data" / "predictor-x86-cuda-before-algorithms.json")
    assert "cpu/conv2d/direct-nchwc/k1" in p.t_ and "gpu/conv2d/implicit-gemm/kn" in p.t_
    op = OpSpec("conv2d", 13, 13, 512, 125, 1, 1)  # gemm-1x1: no model in that file
    with pytest.warns(AlgorithmFallbackWarning, match="gemm-1x1"):
        first = p.kernel_us("cpu", op)
    assert first == pytest.approx(p._kernel_us("cpu", op, "direct-nchwc"))
    assert math.isfinite(p.predict_op(op, "OC", 0.5)["total_us"])
