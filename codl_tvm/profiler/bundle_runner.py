"""Runtime-only runner of a profiling bundle (and the timing loop every profiling way shares).

This file imports only the standard library, numpy and the TVM *runtime*, so it runs where just
``TVM_USE_RUNTIME_LIB=1`` TVM is installed (a phone, the GPU machine)::

    python codl_tvm/profiler/bundle_runner.py BUNDLE_DIR -o samples.csv [--deadline-s 420]

It reads ``BUNDLE_DIR/manifest.json`` (written by ``codl_tvm.profiler.bundle``), loads each
exported library, times every function with the VM's ``time_evaluator`` and appends one CSV row
per function (the row template from the manifest plus the measured columns). Rows already in
the output are skipped, so an interrupted run resumes. Libraries and functions come in the
order of the manifest (cheapest first); past the deadline, or once one call of a library takes
longer than ``--max-call-s``, the rest of that library is skipped and counted.
"""

from __future__ import annotations

import argparse
import csv
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

MANIFEST_VERSION = 1


def time_function(
    vm: Any, name: str, args: list[Any], dev: Any, min_repeat_ms: float = 5.0, max_repeat: int = 7
) -> tuple[float, float, int, float]:
    """Time ``vm[name](*args)``: (median_us, spread_us, repeats, first_call_s).

    One untimed warm-up call, then ``number`` calls per repeat chosen so a repeat lasts about
    ``min_repeat_ms``; slow kernels get fewer repeats so one measurement stays under ~3 s.
    The VM's stateful API (``set_input`` + ``invoke_stateful``) works both here and over RPC.
    """
    vm.set_input(name, *args)
    t0 = time.perf_counter()
    vm.invoke_stateful(name)
    dev.sync()
    first_s = time.perf_counter() - t0
    number = max(1, int(min_repeat_ms / 1e3 / max(first_s, 1e-7)))
    repeat = max_repeat if first_s < 0.05 else (3 if first_s < 1.0 else 1)
    res = vm.time_evaluator("invoke_stateful", dev, number=number, repeat=repeat)(name)
    costs = np.array(list(res.results)) * 1e6
    return float(np.median(costs)), float((costs.max() - costs.min()) / 2), repeat, first_s


def device(kind: str, index: int, remote: Any = None) -> Any:
    import tvm

    return remote.device(kind, index) if remote is not None else tvm.device(kind, index)


def make_inputs(shapes: list[list[int]], devs: list[Any], seed: int = 0) -> list[Any]:
    import tvm

    rng = np.random.default_rng(seed)
    return [
        tvm.runtime.tensor(rng.standard_normal(tuple(s), dtype=np.float32), d)
        for s, d in zip(shapes, devs, strict=False)
    ]


def setup_cuda(arch: str) -> None:
    """Runtime-only CUDA: load the CUDA runtime module and compile kernels with nvcc at load."""
    import tvm
    import tvm_ffi

    lib = Path(tvm.__file__).parent / "lib" / "libtvm_runtime_cuda.so"
    if lib.exists():
        ctypes.CDLL(str(lib), ctypes.RTLD_GLOBAL)

    def compile_cuda(code: str, *_: Any) -> bytearray:
        with tempfile.TemporaryDirectory() as tmp:
            src, out = Path(tmp, "k.cu"), Path(tmp, "k.fatbin")
            src.write_text(code)
            cmd = ["nvcc", "--fatbin", "-O3", f"-arch={arch}", "-o", str(out), str(src)]
            subprocess.run(cmd, check=True, capture_output=True)
            return bytearray(out.read_bytes())

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", compile_cuda, override=True)


def _done_keys(path: Path, key_cols: list[str]) -> set[tuple[str, ...]]:
    if not path.exists() or path.stat().st_size == 0:
        return set()
    with path.open(newline="") as fh:
        return {_key(row, key_cols) for row in csv.DictReader(fh)}


def _key(row: dict[str, Any], key_cols: list[str]) -> tuple[str, ...]:
    return tuple(f"{float(row[c]):.4f}" if c == "ratio" else str(row[c]) for c in key_cols)


def run_bundle(
    bundle: str | Path, out: str | Path, deadline_s: float = 420.0, max_call_s: float = 3.0
) -> dict[str, int]:
    """Measure every function of a bundle; returns counts of measured / skipped / resumed rows."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    bundle, out = Path(bundle), Path(out)
    man = json.loads((bundle / "manifest.json").read_text())
    if man.get("version") != MANIFEST_VERSION:
        raise SystemExit(
            f"{bundle}: manifest version {man.get('version')} is not {MANIFEST_VERSION}"
        )
    cols, key_cols = man["columns"], man["key_columns"]
    if man.get("cuda_arch"):
        setup_cuda(man["cuda_arch"])
    done = _done_keys(out, key_cols)
    new_file = not out.exists() or out.stat().st_size == 0
    out.parent.mkdir(parents=True, exist_ok=True)
    counts = {"measured": 0, "skipped": 0, "resumed": 0}
    start = time.perf_counter()
    with out.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, cols)
        if new_file:
            writer.writeheader()
        for lib in man["libs"]:
            todo = [e for e in lib["entries"] if _key(e["row"], key_cols) not in done]
            counts["resumed"] += len(lib["entries"]) - len(todo)
            if not todo or time.perf_counter() - start > deadline_s:
                counts["skipped"] += len(todo)
                continue
            devs = [tvm.device(k, i) for k, i in lib["devices"]]
            vm = VirtualMachine(tvm.runtime.load_module(str(bundle / lib["file"])), devs)
            for n, entry in enumerate(todo):
                if time.perf_counter() - start > deadline_s:
                    counts["skipped"] += len(todo) - n
                    break
                args = make_inputs(entry["inputs"], [devs[i] for i in entry["input_devices"]])
                med, spread, rep, first = time_function(
                    vm, entry["name"], args, devs[entry["timer_device"]]
                )
                row = dict(
                    entry["row"], latency_us=round(med, 3), spread_us=round(spread, 3), repeat=rep
                )
                if "cores" in lib:
                    row["cores"] = lib["cores"]
                writer.writerow({c: row[c] for c in cols})
                fh.flush()
                counts["measured"] += 1
                if first > max_call_s:
                    counts["skipped"] += len(todo) - n - 1
                    break
            print(
                f"{lib['file']}: done ({counts}, {time.perf_counter() - start:.0f} s)", flush=True
            )
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bundle", help="bundle folder with manifest.json")
    parser.add_argument("-o", "--output", required=True, help="samples CSV to append to")
    parser.add_argument("--deadline-s", type=float, default=420.0)
    parser.add_argument("--max-call-s", type=float, default=3.0)
    args = parser.parse_args(argv)
    counts = run_bundle(args.bundle, args.output, args.deadline_s, args.max_call_s)
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
    sys.exit(main())
