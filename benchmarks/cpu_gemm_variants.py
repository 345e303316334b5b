"""The CPU matmul's two kernels (``KernelVariants.cpu_matmul``) on this host, shape by shape.

``streamed`` keeps a task's whole accumulator (4 rows x up to 16 column blocks) in memory and
streams the (K, N) weight row by row; ``packed`` (the default above a GEMV's rows) copies the
weight into ``(N / NR, K, NR)`` panels inside the kernel and runs each 4-row x NR-column tile
over all of K with its accumulators in registers (``schedules.cpu_rules``). Same shapes, one
process, ``time_evaluator`` (best of 5 x 5 runs), outputs checked against numpy:

    python benchmarks/cpu_gemm_variants.py [-o benchmarks/results/cpu-gemm-variants.json]

Shapes: ViT-B/16's four dense layers (197 tokens), BERT-base's 768-wide dense layer
(128 tokens), ConvNeXt-T's first MLP (56 x 56 pixels, 96 -> 384), and attention's P V as one
(12 x 128, 64) x (64, 128) matmul.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = [(197, 768, 2304), (197, 768, 3072), (197, 3072, 768), (128, 768, 768),
          (3136, 96, 384), (1536, 64, 128)]


def _matmul(m: int, k: int, n: int):
    from tvm import te

    a, b = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    return a, b, te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")


def dispatch_kernel(m: int, k: int, n: int, target, variant: str):
    """The kernel the dispatch makes for this matmul with ``cpu_matmul=variant``."""
    from tvm import te

    from codl_tvm import tiling
    from codl_tvm.schedules.dispatch import schedule_func
    from codl_tvm.schedules.target_info import target_info

    with tiling.use_variants(cpu_matmul=variant):
        func, blocking, _ = schedule_func(te.create_prim_func(_matmul(m, k, n)), target,
                                          target_info(target))
    return func, blocking.algorithm


def _time_ms(func, args, target) -> float:
    import tvm

    lib = tvm.compile(tvm.IRModule({"main": func}), target=target)
    mod = lib.mod if hasattr(lib, "mod") else lib
    return min(mod.time_evaluator("main", tvm.cpu(0), number=5, repeat=5)(*args).results) * 1e3


def main() -> int:
    import tvm

    from codl_tvm.device import DevicePair
    from codl_tvm.schedules.target_info import target_info

    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", default="benchmarks/results/cpu-gemm-variants.json")
    args = p.parse_args()
    target = DevicePair.preset("cpu-pair").cpu_target  # this host's CPU and cores
    lanes = target_info(target).lanes
    rows, dev = [], tvm.cpu(0)
    print(f"{'M x K x N':>18} {'streamed ms':>12} {'packed ms':>10} {'ratio':>6}  GFLOP/s")
    for m, k, n in SHAPES:
        rng = np.random.default_rng(0)
        a_np = rng.standard_normal((m, k)).astype("float32")
        b_np = rng.standard_normal((k, n)).astype("float32")
        want = a_np @ b_np
        row: dict = {"m": m, "k": k, "n": n}
        for variant in ("streamed", "packed"):
            func, algorithm = dispatch_kernel(m, k, n, target, variant)
            out = tvm.runtime.empty((m, n), "float32", dev)
            ms = _time_ms(func, [tvm.runtime.tensor(a_np, dev), tvm.runtime.tensor(b_np, dev),
                                 out], target)
            err = float(np.linalg.norm(out.numpy() - want) / np.linalg.norm(want))
            row |= {f"{variant}_algorithm": algorithm, f"{variant}_ms": round(ms, 4),
                    f"{variant}_rel_err": err}
        row["speedup"] = round(row["streamed_ms"] / row["packed_ms"], 2)
        rows.append(row)
        gflops = 2 * m * k * n / 1e6
        print(f"{m:>6} x {k:>4} x {n:>4} {row['streamed_ms']:12.3f} {row['packed_ms']:10.3f} "
              f"{row['speedup']:6.2f}  {gflops / row['streamed_ms']:.0f} -> "
              f"{gflops / row['packed_ms']:.0f}")
    doc = {"host": platform.processor() or platform.machine(), "target": str(target),
           "lanes": lanes, "rows": rows}
    Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
