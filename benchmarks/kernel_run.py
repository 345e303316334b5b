"""Runtime-only half of benchmarks/kernels.py: time exported kernels, print a table, write JSON.

Imports only the TVM runtime (works with TVM_USE_RUNTIME_LIB=1). CUDA kernels are stored as
source in TVM 0.27 libraries, so the CUDA runtime library is loaded by hand and
``tvm_callback_cuda_compile`` is registered with nvcc before the GPU library is loaded.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import tvm

HERE = Path(__file__).resolve().parent


def _nvcc(code: str, *_args) -> bytearray:
    arch = os.environ.get("CODL_CUDA_ARCH", "sm_90")
    with tempfile.TemporaryDirectory() as tmp:
        src, fatbin = Path(tmp) / "k.cu", Path(tmp) / "k.fatbin"
        src.write_text(code)
        subprocess.run(["nvcc", "--fatbin", "-O3", f"-arch={arch}", "-o", str(fatbin), str(src)],
                       check=True, capture_output=True)
        return bytearray(fatbin.read_bytes())


def enable_cuda() -> bool:
    """Make ``tvm.cuda(0)`` usable in a runtime-only process (see shared/gpu/README.md)."""
    try:
        from codl_tvm.runtime import enable_cuda as lead_enable

        return bool(lead_enable())
    except Exception:  # noqa: BLE001 - lead's runner absent or different: use ours below
        pass
    import tvm_ffi

    lib = Path(tvm.__file__).parent / "lib" / "libtvm_runtime_cuda.so"
    if lib.exists():
        ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
    tvm_ffi.register_global_func("tvm_callback_cuda_compile", _nvcc, override=True)
    return tvm.cuda(0).exist


def gpu_peak(explicit: Path | None) -> dict | None:
    """FP32 FMA peak from peak/peak_gpu.cu (compiled with nvcc here if not given)."""
    if explicit and explicit.exists():
        return json.loads(explicit.read_text())
    if shutil.which("nvcc") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "peak_gpu"
        arch = os.environ.get("CODL_CUDA_ARCH", "sm_90")
        subprocess.run(["nvcc", "-O3", f"-arch={arch}", "-o", str(exe),
                        str(HERE / "peak" / "peak_gpu.cu")], check=True)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _time(lib, name: str, dev, args, min_repeat_ms: float, slow: bool) -> float:
    lib[name](*args)  # warm up (and JIT of CUDA source)
    dev.sync()
    if slow:
        ev = lib.time_evaluator(name, dev, number=1, repeat=1)
        return float(ev(*args).mean)
    ev = lib.time_evaluator(name, dev, number=1, repeat=5, min_repeat_ms=int(min_repeat_ms))
    return float(np.median(ev(*args).results))


def cpu_peak(lib, dev, peak: dict) -> float:
    """FLOP/s of the exported FMA microkernel (benchmarks/peak/peak_cpu.py)."""
    args = [tvm.runtime.tensor(np.full(shape, 0.5, "float32"), dev) for shape in peak["args"]]
    return peak["flops"] / _time(lib, "fma_peak", dev, args, 200.0, False)


def run(d: Path, json_out: Path, min_repeat_ms: float, gpu_peak_json: Path | None) -> None:
    manifest = json.loads((d / "manifest.json").read_text())
    has_gpu = any(k.startswith("gpu") for k in manifest["libs"])
    if has_gpu and not enable_cuda():
        raise SystemExit("manifest has GPU kernels but no CUDA device is usable")
    devs = {"cpu": tvm.cpu(0), "gpu": tvm.cuda(0) if has_gpu else None}
    peak_lib = tvm.runtime.load_module(str(d / "peak_cpu.so"))
    peaks = {"cpu": cpu_peak(peak_lib, devs["cpu"], manifest["peak_cpu"])}
    if has_gpu:
        gp = gpu_peak(gpu_peak_json)
        peaks["gpu"] = gp["gflops"] * 1e9 if gp else None
    libs = {name: tvm.runtime.load_module(str(d / f)) for name, f in manifest["libs"].items()}
    rng = np.random.default_rng(0)
    results = []
    for k in manifest["kernels"]:
        row = {key: k[key] for key in ("name", "op", "params", "flops", "models", "blocking")}
        host = [rng.uniform(-1, 1, shape).astype("float32") for shape in k["args"]]
        for lib_name in manifest["libs"]:
            if not k["runs"].get(lib_name):
                continue
            proc = lib_name.split("_")[0]
            dev = devs[proc]
            args = [tvm.runtime.tensor(a, dev) for a in host]
            slow = lib_name == "cpu_default" or (lib_name == "gpu_default" and k["flops"] > 2e9)
            secs = _time(libs[lib_name], k["name"], dev, args, min_repeat_ms, slow)
            row[f"{lib_name}_us"] = secs * 1e6
            row[f"{lib_name}_gflops"] = k["flops"] / secs / 1e9
            if peaks.get(proc):
                row[f"{lib_name}_pct_peak"] = 100 * k["flops"] / secs / peaks[proc]
        results.append(row)
        print_row(row)
    summary = summarise(results, peaks)
    json_out.write_text(json.dumps({"manifest_targets": manifest["targets"],
                                    "peak_gflops": {p: (v / 1e9 if v else None)
                                                    for p, v in peaks.items()},
                                    "summary": summary, "kernels": results}, indent=1))
    print_summary(summary, peaks)


def print_row(row: dict) -> None:
    cells = [f"{row['name']:<11}", f"{row['flops'] / 1e9:7.3f}"]
    for lib in ("cpu_default", "cpu_ours", "gpu_default", "gpu_ours"):
        g, p = row.get(f"{lib}_gflops"), row.get(f"{lib}_pct_peak")
        cells.append(f"{lib}={g:8.1f} GF/s {p:5.1f}%" if g and p else
                     (f"{lib}={g:8.1f} GF/s" if g else f"{lib}=       -"))
    print("  ".join(cells), flush=True)


def summarise(results: list[dict], peaks: dict) -> dict:
    """Median over shapes: % of peak of ours, and speed-up over default where both ran."""
    out = {}
    for proc in ("cpu", "gpu"):
        ours = [r for r in results if f"{proc}_ours_gflops" in r]
        if not ours:
            continue
        both = [r for r in ours if f"{proc}_default_gflops" in r]
        entry = {"shapes": len(ours), "shapes_with_default": len(both)}
        if both:
            entry["median_speedup"] = statistics.median(
                r[f"{proc}_ours_gflops"] / r[f"{proc}_default_gflops"] for r in both)
        if peaks.get(proc):
            for op in ("all", "conv2d", "pool2d", "dense"):
                sel = [r for r in ours if op in ("all", r["op"])]
                if sel:
                    entry[f"median_pct_peak_{op}"] = statistics.median(
                        r[f"{proc}_ours_pct_peak"] for r in sel)
        out[proc] = entry
    return out


def print_summary(summary: dict, peaks: dict) -> None:
    print("\nmeasured FP32 peak:", {p: f"{v / 1e9:.0f} GFLOP/s" if v else None
                                   for p, v in peaks.items()})
    for proc, entry in summary.items():
        print(proc, json.dumps({k: round(v, 2) if isinstance(v, float) else v
                                for k, v in entry.items()}))
