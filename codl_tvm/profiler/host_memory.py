"""Host tensors a CPU<->GPU copy moves through: pinned where the GPU is CUDA.

Standard library + numpy + the TVM runtime only: ``bundle_runner.py`` imports this file as a
sibling module where only runtime-only TVM exists, and :mod:`codl_tvm.runtime` allocates an
artifact's staging buffers with it, so the profiler times the copies the artifacts run.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

CPU, CUDA, CUDA_HOST = 1, 2, 3  # DLPack device types; kDLCUDAHost: cudaMallocHost memory


def host_tensor(shape: list[int], dtype: str, dev: Any, pinned: bool) -> Any:
    """A tensor on the CPU device ``dev``; with ``pinned``, its bytes are CUDA pinned memory.

    TVM's CPU kernels take only tensors whose device is the CPU, so the pinned allocation
    (``cuda_host``) is handed to them as a CPU tensor over the same bytes: numpy views the
    address (DLPack would keep the ``cuda_host`` device) and TVM takes the view through
    DLPack. The view's buffer holds the allocation, so it lives as long as the tensor.
    """
    import tvm

    if not pinned:
        return tvm.runtime.empty(shape, dtype, dev)
    host = tvm.runtime.empty(shape, dtype, tvm.runtime.Device(CUDA_HOST, 0))
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = (ctypes.c_byte * nbytes).from_address(host.data_ptr())
    raw.owner = host
    return tvm.runtime.from_dlpack(np.frombuffer(raw, dtype=dtype).reshape(shape))


def copy_tensors(shape: list[int], src: int, devs: list[Any], local: bool = True) -> tuple:
    """``(source, destination)`` of a staged copy from ``devs[src]`` to the other of the two
    devices, each made once. A CPU side is pinned where the other is a CUDA GPU and the
    tensors are local (an RPC session cannot view remote pinned memory as a CPU tensor)."""
    kinds = [int(d.dlpack_device_type()) for d in devs]
    pin = local and CUDA in kinds

    def alloc(i: int) -> Any:
        return host_tensor(shape, "float32", devs[i], pinned=pin and kinds[i] == CPU)

    return alloc(src), alloc(1 - src)
