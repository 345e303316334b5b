"""The CPU 1x1 GEMM's register tile on 7x7 images: one pixel vector against two, kernel by kernel.

On 8 lanes (AVX2) 49 pixels fill one-vector tiles best (56 lanes against 64), but with one
vector every FMA needs a weight broadcast of its own; the dispatch keeps two
(``tiling.cpu.FEWEST_FITTED_VECS``). This builds each shape both ways (the constant at 1 and
at 2, everything else the same schedule), checks both against the unscheduled PrimFunc, and
times them interleaved with ``time_evaluator`` (7 rounds, the median of each's best-of-3)::

    TVM_NUM_THREADS=2 python benchmarks/cpu_gemm_fit_tiles.py --mcpu znver3 --cores 2 \
        -o benchmarks/results/cpu-gemm-fit-tiles.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (IC, OC) of 7x7 1x1 convs: GoogLeNet's 5b, MobileNet-V2's tail, GoogLeNet's 5b 5x5 reduce
SHAPES = [(832, 384), (160, 960), (960, 160), (832, 48)]
ROUNDS = 7


def build(ic: int, oc: int, target: dict, fewest: int):
    from codl_tvm.schedules import testing as T
    from codl_tvm.tiling import cpu

    func = T.conv2d_func((1, ic, 7, 7), (oc, ic, 1, 1))
    saved, cpu.FEWEST_FITTED_VECS = cpu.FEWEST_FITTED_VECS, fewest
    try:
        scheduled = T.schedule(func, target)
        err = T.check_cpu(func, target)
    finally:
        cpu.FEWEST_FITTED_VECS = saved
    return func, T.build(scheduled, target), err


def main() -> None:
    import tvm

    from codl_tvm.schedules import testing as T

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mcpu", required=True, help="llvm mcpu of this host, e.g. znver3")
    parser.add_argument("--cores", type=int, required=True, help="num-cores of the target")
    parser.add_argument("-o", "--output", type=Path, help="results JSON (a new file)")
    args = parser.parse_args()
    target = {"kind": "llvm", "mcpu": args.mcpu, "num-cores": args.cores}
    rows = []
    print("| IC->OC at 7x7 | one vector us | two vectors us | one / two | rel err |")
    print("|---|---:|---:|---:|---:|")
    for ic, oc in SHAPES:
        built = {n: build(ic, oc, target, n) for n in (1, 2)}
        func = built[1][0]
        dev = tvm.cpu()
        args_ = [tvm.runtime.tensor(a, dev) for a in T.random_args(func)]
        out = tvm.runtime.empty([int(s) for s in func.params[-1].shape], "float32", dev)
        best: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(ROUNDS):
            for n, (_, lib, _) in built.items():
                timer = lib.mod.time_evaluator("main", dev, number=20, repeat=3, min_repeat_ms=20)
                best[n].append(min(timer(*args_, out).results) * 1e6)
        us = {n: float(np.median(v)) for n, v in best.items()}
        err = max(built[1][2], built[2][2])
        rows.append({"ic": ic, "oc": oc, "hw": 7, "one_vector_us": us[1], "two_vectors_us": us[2],
                     "ratio": us[1] / us[2], "rel_err": err})  # fmt: skip
        print(f"| {ic}->{oc} | {us[1]:.1f} | {us[2]:.1f} | {us[1] / us[2]:.2f} | {err:.1e} |")
    if args.output is not None:
        doc = {"host": platform.processor() or platform.machine(), "target": target,
               "rounds": ROUNDS, "rows": rows}  # fmt: skip
        with args.output.open("x") as f:  # never over an existing file
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
