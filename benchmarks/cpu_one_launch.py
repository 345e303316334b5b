"""What a parallel launch of TVM's CPU thread pool costs on this CPU, and a barrier inside one.

Times a kernel of one trivial parallel loop (one launch), of three such loops in a row (three
launches, as a CPU kernel's pack, compute and unpack passes run), and the same three loops in
one launch with barriers between them (TVM's ``pragma_parallel_launch_point`` and
``pragma_parallel_barrier_when_finish``), each over 16 and 64 iterations, at each thread count
of ``--threads``::

    python benchmarks/cpu_one_launch.py --threads 1,2 -o benchmarks/results/cpu-one-launch.json

For a machine with only the TVM runtime (the GPU machine's CPU), ``--build DIR`` exports the
kernels for ``--mcpu``, and ``--run DIR`` times them there::

    python benchmarks/cpu_one_launch.py --mcpu sapphirerapids --build DIR
    python3 benchmarks/cpu_one_launch.py --run DIR --threads 16,8,4 -o OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KERNELS = ("one-loop", "three-launches", "one-launch")
CALLS, REPEATS = 2000, 7


def kernel(name: str, tasks: int):
    """The PrimFunc ``name`` over ``tasks`` iterations a loop."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def one(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32"),
            c: T.Buffer((64,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i in T.parallel(tasks):
            b[i] = a[i] + T.float32(1)

    @T.prim_func(s_tir=True)
    def three(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32"),
              c: T.Buffer((64,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i in T.parallel(tasks):
            c[i] = a[i] + T.float32(1)
        for i in T.parallel(tasks):
            b[i] = c[i] * T.float32(2)
        for i in T.parallel(tasks):
            c[i] = b[i] + a[i]

    @T.prim_func(s_tir=True)
    def launched(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32"),
                 c: T.Buffer((64,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        with T.attr(0, "pragma_parallel_launch_point", 1):
            with T.attr(0, "pragma_parallel_barrier_when_finish", 1):
                for i in T.parallel(tasks):
                    c[i] = a[i] + T.float32(1)
            with T.attr(0, "pragma_parallel_barrier_when_finish", 1):
                for i in T.parallel(tasks):
                    b[i] = c[i] * T.float32(2)
            for i in T.parallel(tasks):
                c[i] = b[i] + a[i]

    return {"one-loop": one, "three-launches": three, "one-launch": launched}[name]


def build(mcpu: str | None, folder: Path) -> None:
    import tvm

    target = {"kind": "llvm", **({"mcpu": mcpu} if mcpu else {})}
    for name in KERNELS:
        for tasks in (16, 64):
            lib = tvm.compile(tvm.IRModule({"main": kernel(name, tasks)}), target=target)
            lib.export_library(str(folder / f"{name}-{tasks}.so"))


def time_folder(folder: Path) -> list[dict]:
    """Each kernel's median call in microseconds at this process's thread count."""
    import tvm

    dev, rows = tvm.cpu(), []
    a = np.arange(64, dtype="float32")
    for name in KERNELS:
        for tasks in (16, 64):
            lib = tvm.runtime.load_module(str(folder / f"{name}-{tasks}.so"))
            args = [tvm.runtime.tensor(x, dev) for x in (a, np.zeros(64, "float32"),
                                                          np.zeros(64, "float32"))]
            lib["main"](*args)
            want = a + 1 if name == "one-loop" else (a + 1) * 2 + a
            got = (args[1] if name == "one-loop" else args[2]).numpy()
            assert np.allclose(got[:tasks], want[:tasks]), name
            timer = lib.time_evaluator("main", dev, number=CALLS, repeat=REPEATS)
            rows.append({"kernel": name, "tasks": tasks,
                         "us": float(np.median(timer(*args).results)) * 1e6})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mcpu", help="llvm mcpu to build for (default: generic)")
    parser.add_argument("--build", type=Path, help="export the kernels to this new folder")
    parser.add_argument("--run", type=Path, help="time the kernels of a --build folder")
    parser.add_argument("--threads", default="2", help="thread counts, e.g. 16,8,4")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("-o", "--output", type=Path, help="results JSON (a new file)")
    args = parser.parse_args()
    if args.worker:  # one thread count per process: TVM's pool size is fixed at its start
        print(json.dumps(time_folder(args.run)))
        return
    if args.build is not None:
        tmp = args.build.with_name(f".{args.build.name}.partial")
        tmp.mkdir(parents=True)  # fails on a leftover: never over another run's files
        build(args.mcpu, tmp)
        tmp.rename(args.build)  # complete, or not there at all
        print(f"wrote {args.build}")
        return
    if args.run is not None:
        rows = time_threads(args.run, args.threads)
    else:  # build here into a temporary folder, for this host
        import tempfile

        with tempfile.TemporaryDirectory(prefix="codl-one-launch-") as tmp:
            build(args.mcpu, Path(tmp))
            rows = time_threads(Path(tmp), args.threads)
    if args.output is not None:
        doc = {"host": platform.processor() or platform.machine(), "calls": CALLS,
               "repeats": REPEATS, "rows": rows, "cells": "16 / 64 iterations a loop"}
        with args.output.open("x") as f:  # never over an existing file
            json.dump(doc, f, indent=1)


def time_threads(folder: Path, threads_list: str) -> list[dict]:
    """Time the kernels of ``folder`` in one process per thread count; print the table."""
    rows = []
    print("| threads | one loop us | three launches us | one launch, two barriers us |")
    print("|---:|---:|---:|---:|")
    for threads in (int(t) for t in threads_list.split(",")):
        env = {**os.environ, "TVM_NUM_THREADS": str(threads)}
        out = subprocess.run([sys.executable, __file__, "--worker", "--run", str(folder)],
                             env=env, check=True, capture_output=True, text=True).stdout
        got = [dict(r, threads=threads) for r in json.loads(out.splitlines()[-1])]
        rows += got
        us = {(r["kernel"], r["tasks"]): r["us"] for r in got}
        cells = [f"{us[(k, 16)]:.2f} / {us[(k, 64)]:.2f}" for k in KERNELS]
        print(f"| {threads} | " + " | ".join(cells) + " |")
    return rows


if __name__ == "__main__":
    main()
