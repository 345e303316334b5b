"""What a split's data sharing costs: TVM's copies between the CPU and a GPU, by size.

A split moves the CPU part's input rows to the host and its output rows back; TVM's VM does it
with ``CopyDataFromTo`` (``to_vdevice``). This times those copies on one device per process,
the way the runtime makes them, beside a ``memcpy`` of the same bytes (the floor where CPU and
GPU share memory, as PoCL's CPU device does and a phone's GPU does):

- ``--device pocl`` / ``nvidia-opencl`` (the process's OpenCL device, chosen with
  ``OCL_ICD_VENDORS``), with ``--buffers default`` (device buffers, upstream's default) or
  ``host-ptr`` (``CL_MEM_ALLOC_HOST_PTR`` buffers: the runtime's host-allocated option);
- ``--device cuda``: pageable host memory and pinned (``cuda_host``) memory.

    python benchmarks/opencl_sharing.py --device pocl --buffers host-ptr -o $OUT/s.json
    # every configuration on the GPU machine: bash benchmarks/run_opencl.sh sharing

TVM's OpenCL runtime maps host-ptr buffers (``GetNativePtr``), but neither the VM nor the
Python API reads through the mapping: a split's copies stay ``clEnqueueRead/WriteBuffer``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SIZES_MIB = (0.5, 2, 8, 32)  # 2 and 8 MiB: the CUDA figures of benchmarks/COEXEC.md
REPEAT = 30


def _median_us(fn, sync) -> float:
    fn()
    sync()
    times = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e6)


def measure(device: str, buffers: str) -> list[dict]:
    import tvm

    from codl_tvm.profiler.host_memory import host_tensor

    if device == "cuda":
        from codl_tvm.runtime import enable_cuda

        enable_cuda()
        dev, hosts = tvm.cuda(0), ("pageable", "pinned")
    else:
        from codl_tvm.opencl_runtime import enable_opencl

        if not enable_opencl(buffers):
            raise SystemExit("no OpenCL device in this process")
        dev, hosts = tvm.opencl(0), ("pageable",)
    name = dev.device_name
    rows = []
    for mib in SIZES_MIB:
        shape = [int(mib * 2**20) // 4]
        src = np.random.default_rng(0).standard_normal(shape).astype("float32")
        dst = np.empty_like(src)
        rows.append({"device": device, "buffers": "-", "host": "-", "direction": "memcpy",
                     "mib": mib, "us": _median_us(lambda d=dst, s=src: np.copyto(d, s),
                                                  lambda: None)})
        on_dev = tvm.runtime.empty(shape, "float32", dev)
        for host in hosts:
            h = host_tensor(shape, "float32", tvm.cpu(0), pinned=host == "pinned")
            h.copyfrom(src)
            for direction, fn in (("to-gpu", lambda t=on_dev, h=h: t.copyfrom(h)),
                                  ("to-cpu", lambda t=on_dev, h=h: t.copyto(h))):
                rows.append({"device": device, "buffers": buffers, "host": host,
                             "direction": direction, "mib": mib,
                             "us": _median_us(fn, dev.sync)})
    for r in rows:
        r["device_name"] = name
        r["gb_per_s"] = round(r["mib"] * 2**20 / (r["us"] * 1e-6) / 1e9, 2)
        r["us"] = round(r["us"], 1)
        print(f"{r['device']:14s} {r['buffers']:9s} {r['host']:9s} {r['direction']:7s} "
              f"{r['mib']:5g} MiB {r['us']:9.1f} us {r['gb_per_s']:6.2f} GB/s", flush=True)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", required=True, help="pocl, nvidia-opencl, ... or cuda")
    p.add_argument("--buffers", choices=("default", "host-ptr"), default="default")
    p.add_argument("-o", "--output",
                   default=os.path.join(os.environ.get("OUT", "."), "sharing.json"))
    args = p.parse_args()
    rows = measure(args.device, args.buffers)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
