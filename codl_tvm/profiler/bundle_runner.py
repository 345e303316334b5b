"""Runtime-only runner of a profiling bundle (and the timing loop every profiling way shares).

This file imports only the standard library, numpy and the TVM *runtime*, so it runs where just
``TVM_USE_RUNTIME_LIB=1`` TVM is installed (a phone, the GPU machine)::

    python codl_tvm/profiler/bundle_runner.py BUNDLE_DIR -o samples.csv [--deadline-s 420]

It reads ``BUNDLE_DIR/manifest.json`` (written by ``codl_tvm.profiler.bundle``), loads every
exported library, and measures every function with the protocol of
:mod:`codl_tvm.profiler.rounds`: ``--rounds`` visits per function, round-robin over the
libraries (GPU, CPU and copy kernels alternate) and reshuffled each round, each visit warmed up
and timed in repeats of at least ``--min-repeat-ms``. Rows (the manifest's row template plus the
measured columns) go to the CSV after each round; every visit goes to ``OUT.rounds.jsonl`` at
once, so an interrupted run resumes. Past the deadline no more visits start (rows measured in
fewer rounds keep what they have); once one call of a library takes longer than
``--max-call-s``, that library's costlier functions get no more visits.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__:
    from codl_tvm.profiler import machine_facts
    from codl_tvm.profiler.cpu_pool import pair_threads, use_cpu_threads
    from codl_tvm.profiler.host_memory import copy_tensors
    from codl_tvm.profiler.nvcc import compile_cuda
    from codl_tvm.profiler.rounds import (
        Item,
        Protocol,
        RoundBook,
        cold_weights,
        interleave,
        run_rounds,
        time_copy,
        time_function,
    )
else:  # run as a file where only runtime-only TVM exists: the sibling modules
    import machine_facts  # type: ignore
    from cpu_pool import pair_threads, use_cpu_threads  # type: ignore
    from host_memory import copy_tensors  # type: ignore
    from nvcc import compile_cuda  # type: ignore
    from rounds import (  # type: ignore
        Item,
        Protocol,
        RoundBook,
        cold_weights,
        interleave,
        run_rounds,
        time_copy,
        time_function,
    )

MANIFEST_VERSION = 3
# 2 adds the per-role left-out counts; 3 times copies as staged copies (a library of null)
READS_VERSIONS = (1, 2, 3)


def device(kind: str, index: int, remote: Any = None) -> Any:
    import tvm

    return remote.device(kind, index) if remote is not None else tvm.device(kind, index)


_NORMALS: dict[int, np.ndarray] = {}  # seed -> one draw


def _normals(n: int, seed: int) -> np.ndarray:
    """``n`` standard normal floats: a prefix of one cached draw (grown as needed).

    Drawing a 100 MB input anew took longer than timing its kernel; values do not change a
    float kernel's time, so every visit copies from the same draw.
    """
    have = len(_NORMALS.get(seed, ()))
    if have < n:
        size = max(n, 2 * have, 1 << 16)
        _NORMALS[seed] = np.random.default_rng(seed).standard_normal(size, dtype=np.float32)
    return _NORMALS[seed][:n]


def make_inputs(shapes: list[list[int]], devs: list[Any], seed: int = 0) -> list[Any]:
    import tvm

    return [
        tvm.runtime.tensor(_normals(int(np.prod(s)), seed).reshape(tuple(s)), d)
        for s, d in zip(shapes, devs, strict=False)
    ]


def setup_cuda(arch: str) -> None:
    """Runtime-only CUDA: load the CUDA runtime module and compile kernels with nvcc at load."""
    import tvm
    import tvm_ffi

    lib = Path(tvm.__file__).parent / "lib" / "libtvm_runtime_cuda.so"
    if lib.exists():
        ctypes.CDLL(str(lib), ctypes.RTLD_GLOBAL)

    tvm_ffi.register_global_func("tvm_callback_cuda_compile",
                                 lambda code, *_: compile_cuda(code, arch), override=True)


def warm_cuda(bundle: Path, man: dict[str, Any], jobs: int) -> None:
    """Load every CUDA library of the bundle in ``jobs`` parallel processes (fills the cache)."""
    os.environ.setdefault("CODL_CUDA_CACHE", tempfile.mkdtemp(prefix="codl-nvcc-"))
    files = [str(bundle / lib["file"]) for lib in man["libs"]
             if lib["file"] and any(kind == "cuda" for kind, _ in lib["devices"])]
    chunks = [files[i::jobs] for i in range(jobs) if files[i::jobs]]
    # this file run as a script: the package's __init__ may need TVM's compiler
    procs = [subprocess.Popen([sys.executable, __file__, "--warm", man["cuda_arch"], *c])
             for c in chunks]
    for proc in procs:
        proc.wait()


def _key_fn(key_cols: list[str]):
    def key(row: dict[str, Any]) -> tuple[str, ...]:
        return tuple(f"{float(row[c]):.4f}" if c == "ratio" else str(row[c]) for c in key_cols)

    return key


def _visit(vm: Any, entry: dict[str, Any], devs: list[Any], proto: Protocol):
    def visit() -> tuple[list[float], float]:
        args = make_inputs(entry["inputs"], [devs[i] for i in entry["input_devices"]])
        dev = devs[entry["timer_device"]]
        cold = cold_weights(proto, entry.get("op", entry.get("row", {}).get("op")), dev)
        return time_function(vm, entry["name"], args, dev, proto, cold)

    return visit


def copy_visit(entry: dict[str, Any], devs: list[Any], proto: Protocol, local: bool = True):
    """A visit of one staged copy (a library of ``null``): its two tensors are made per visit,
    as a loaded model makes its staging buffers once."""

    if entry.get("op", entry.get("row", {}).get("op")) == "copy_gpu":
        return _block_copy_visit(entry, devs, proto)

    def visit() -> tuple[list[float], float]:
        src, dst = copy_tensors(entry["inputs"][0], entry["input_devices"][0], devs, local)
        return time_copy(src, dst, devs[entry["timer_device"]], proto)

    return visit


def _block_copy_visit(entry: dict[str, Any], devs: list[Any], proto: Protocol):
    """A visit of a ``copy_gpu`` job: rows 1..h of a (1, c, h+1, w) tensor copied into a
    (1, c, h, w) one on the same device by one 2-D copy, as a split's row slice is."""
    import tvm

    try:
        from codl_tvm import streams
    except ImportError:  # run as a file: the repository is two folders up
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from codl_tvm import streams
    _, c, h, w = entry["inputs"][0]
    dev = devs[entry["input_devices"][0]]
    row = w * 4
    geometry = (row, (h + 1) * row, 0, h * row, h * row, c)  # float32, batch 1

    def visit() -> tuple[list[float], float]:
        src = tvm.runtime.empty((1, c, h + 1, w), "float32", dev)
        dst = tvm.runtime.empty((1, c, h, w), "float32", dev)
        return time_copy(src, dst, dev, proto,
                         copy=lambda s, d: streams.copy_block(s, d, *geometry))

    return visit


def run_bundle(
    bundle: str | Path,
    out: str | Path,
    deadline_s: float = 420.0,
    max_call_s: float = 3.0,
    proto: Protocol | None = None,
    warm_jobs: int = 1,
) -> dict[str, int]:
    """Measure every function of a bundle in rounds; returns counts of rows and visits.

    With ``warm_jobs`` > 1 the CUDA libraries are first loaded in that many processes, so nvcc
    compiles them in parallel into ``$CODL_CUDA_CACHE`` (set to a temp folder if unset).

    All libraries are loaded first, then the entries are visited round-robin over the
    libraries (GPU, CPU and copy kernels alternate) in each of ``proto.rounds`` rounds.
    """
    import tvm
    from tvm.runtime.vm import VirtualMachine

    proto = proto or Protocol()
    bundle, out = Path(bundle), Path(out)
    man = json.loads((bundle / "manifest.json").read_text())
    if man.get("version") not in READS_VERSIONS:
        raise SystemExit(
            f"{bundle}: manifest version {man.get('version')} is not one of {READS_VERSIONS}"
        )
    # a bundle of CPU kernels alone runs on a machine without CUDA (the dev CPU)
    if man.get("cuda_arch") and any(k == "cuda" for lib in man["libs"] for k, _ in lib["devices"]):
        setup_cuda(man["cuda_arch"])
        if warm_jobs > 1:
            warm_cuda(bundle, man, warm_jobs)
    gpus = [tvm.device(k, i) for lib in man["libs"] for k, i in lib["devices"] if k != "cpu"]
    facts = {**man.get("codegen_facts", {}), **machine_facts.detect(gpus[0] if gpus else None)}
    if man.get("kernel_variants"):  # the variants the bundle's kernels were built with
        facts["kernel_variants"] = man["kernel_variants"]
    facts["protocol"] = proto.to_json()  # how the samples were timed (CPU weights evicted?)
    print(f"machine facts: {machine_facts.write(out, facts)}", flush=True)
    book = RoundBook(out, man["columns"], _key_fn(man["key_columns"]))
    threads = use_cpu_threads(pair_threads(man.get("pair")))
    print(f"TVM CPU pool: {threads or 'default'} workers", flush=True)
    start = time.perf_counter()
    per_lib = []
    for lib in man["libs"]:
        if all(book.final(e["row"]) for e in lib["entries"]):
            per_lib.append([None] * len(lib["entries"]))
            continue
        devs = [tvm.device(k, i) for k, i in lib["devices"]]
        if lib["file"] is None:
            per_lib.append([Item(e["row"], copy_visit(e, devs, proto), "copies", e["flops"])
                            for e in lib["entries"]])  # fmt: skip
            continue
        vm = VirtualMachine(tvm.runtime.load_module(str(bundle / lib["file"])), devs)
        items = []
        for entry in lib["entries"]:
            row = dict(entry["row"], **({"cores": lib["cores"]} if "cores" in lib else {}))
            items.append(Item(row, _visit(vm, entry, devs, proto), lib["file"], entry["flops"]))
        per_lib.append(items)
    print(f"loaded {len(per_lib)} libraries in {time.perf_counter() - start:.0f} s", flush=True)
    items = [it for it in interleave(per_lib) if it is not None]
    resumed = sum(1 for group in per_lib for it in group if it is None)
    left = max(1.0, deadline_s - (time.perf_counter() - start))
    step = max(1, len(items) * proto.rounds // 20)

    def progress(done: int, total: int) -> None:
        if done % step == 0:
            print(f"{done}/{total} visits, {time.perf_counter() - start:.0f} s", flush=True)

    counts = run_rounds(items, book, proto, left, max_call_s, progress)
    counts["resumed"] += resumed
    return counts


def add_protocol_arguments(parser: argparse.ArgumentParser) -> None:
    """``--rounds``, ``--min-repeat-ms``, ... (shared with ``codl-tvm profile``)."""
    d = Protocol()
    parser.add_argument(
        "--rounds",
        type=int,
        default=d.rounds,
        help=f"visits of every sample, interleaved (default {d.rounds})",
    )
    parser.add_argument(
        "--min-repeat-ms",
        type=float,
        default=d.min_repeat_ms,
        help=f"least duration of one timed repeat (default {d.min_repeat_ms})",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=d.repeats,
        help=f"timed repeats per visit (default {d.repeats})",
    )
    parser.add_argument("--max-sample-ms", type=float, default=d.max_sample_ms,
                        help="cap of one visit's timed repeats; slower kernels get fewer "
                        f"(default {d.max_sample_ms})")  # fmt: skip
    parser.add_argument("--warm-weights", action="store_true",
                        help="time CPU ops with weights as the previous call left them in the "
                        "caches (default: evicted before each call, as a whole model reads them)")


def protocol_from_args(args: argparse.Namespace) -> Protocol:
    return Protocol(rounds=max(1, args.rounds), min_repeat_ms=args.min_repeat_ms,
                    repeats=max(1, args.repeats), max_sample_ms=args.max_sample_ms,
                    cpu_cold_weights=not args.warm_weights)  # fmt: skip


def _warm_main(arch: str, files: list[str]) -> int:
    import tvm

    setup_cuda(arch)
    for f in files:
        tvm.runtime.load_module(f)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--warm"]:
        return _warm_main(argv[1], argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bundle", help="bundle folder with manifest.json")
    parser.add_argument("-o", "--output", required=True, help="samples CSV to add rows to")
    parser.add_argument("--deadline-s", type=float, default=420.0)
    parser.add_argument("--max-call-s", type=float, default=3.0)
    parser.add_argument("--warm-jobs", type=int, default=1,
                        help="processes compiling the CUDA libraries (nvcc) before timing")
    add_protocol_arguments(parser)
    args = parser.parse_args(argv)
    proto = protocol_from_args(args)
    counts = run_bundle(args.bundle, args.output, args.deadline_s, args.max_call_s, proto,
                        args.warm_jobs)
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
    sys.exit(main())
