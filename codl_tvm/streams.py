"""Two streams for a split model on a CUDA GPU: kernels on one, CPU<->GPU copies on the other.

TVM launches kernels on the thread's current stream (``TVMFFIEnvGetStream``) and runs every
copy (``runtime.TVMTensorCopyFromTo``, ``vm.builtin.to_device``, a tensor's ``numpy()``) on
the device's legacy default stream. :class:`~codl_tvm.passes.OverlapCopies` moves a model's
kernels to a *kernel stream* of their own, so a copy no longer queues behind kernels it does
not need: the copy of the CPU's rows to the host waits only for the kernels before it (an
event), the GPU part runs while the CPU computes, and the copy of the CPU's rows back starts
as soon as the CPU is done, not when the GPU part is. The VM calls the functions below, each
with one tensor of the GPU (its device names the streams):

=================  ==============================================================
``BEGIN``          the host waits for the copy stream (the previous run); kernels
                   go to the kernel stream, after everything copied so far
``COPIES_WAIT``    copies issued next wait for the kernels issued so far
``KERNELS_WAIT``   kernels issued next wait for the copies issued so far
``HOST_WAITS``     the host waits for the copies issued so far (a copy to the CPU)
``END``            the copy stream waits for the kernels, kernels go back to the
                   default stream: a ``numpy()`` or a timer after ``main`` sees the
                   whole run
=================  ==============================================================

On a CPU device they do nothing, which is what the CPU pair's tests run. Importing this module
registers them; :mod:`codl_tvm.runtime` does.

``COPY_BLOCK`` (:func:`copy_block`) is the copy :class:`~codl_tvm.passes.LowerSlicesToBlockCopies`
puts where a split sliced or concatenated with kernels: one 2-D copy (``cudaMemcpy2DAsync``,
run by the GPU's copy engines, not its SMs) of a block of rows or channels between two
tensors, from the full tensor or into it. A copy that crosses the bus goes on the copy stream;
one within the GPU on the stream the kernels are on, so it stays in order with them.

Two implementations register under these names: the Python functions below, and native ones
(:mod:`codl_tvm.native`, ``streams.cc``: the same rules in C++, built with the machine's C++
compiler on first use), where a call is the CUDA calls alone. ``$CODL_TVM_STREAMS`` chooses:
``native`` (and fail if it cannot be built), ``python``, or ``auto`` (the default: native where
it builds, else Python; :func:`implementation` says which and why). The VM looks the functions
up when it is created, so :func:`use` affects the VMs made after it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import tvm

BEGIN = "codl.streams.begin"
COPIES_WAIT = "codl.streams.copies_wait_for_kernels"
KERNELS_WAIT = "codl.streams.kernels_wait_for_copies"
HOST_WAITS = "codl.streams.host_waits_for_copies"
END = "codl.streams.end"
COPY_BLOCK = "codl.copy_block"
COPY_STREAM = 0  # the legacy default stream, where TVM's copies run
CPU, CUDA = 1, 2  # DLPack device types
MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: the driver tells host from device by address (UVA)

_create = tvm.get_global_func("runtime.Device_StreamCreate")
_set = tvm.get_global_func("runtime.Device_SetStream")
_sync = tvm.get_global_func("runtime.Device_StreamSync")
_order = tvm.get_global_func("runtime.Device_StreamSyncFromTo")  # (dev, first, then)
_kernel_streams: dict[tuple[int, int], int] = {}
_on_kernel_stream: set[tuple[int, int]] = set()  # devices between BEGIN and END


def kernel_stream(dev: Any) -> int:
    """The kernel stream of ``dev`` (a non-blocking stream, made once per process)."""
    key = (int(dev.dlpack_device_type()), int(dev.index))
    if key not in _kernel_streams:
        _kernel_streams[key] = int(_create(dev))
    return _kernel_streams[key]


def _key(dev: Any) -> tuple[int, int]:
    return int(dev.dlpack_device_type()), int(dev.index)


def _begin(t: Any) -> None:
    dev = t.device
    _sync(dev, COPY_STREAM)
    stream = kernel_stream(dev)
    _set(dev, stream)
    _order(dev, COPY_STREAM, stream)
    _on_kernel_stream.add(_key(dev))


def _copies_wait(t: Any) -> None:
    _order(t.device, kernel_stream(t.device), COPY_STREAM)


def _kernels_wait(t: Any) -> None:
    _order(t.device, COPY_STREAM, kernel_stream(t.device))


def _host_waits(t: Any) -> None:
    _sync(t.device, COPY_STREAM)


def _end(t: Any) -> None:
    dev = t.device
    _order(dev, kernel_stream(dev), COPY_STREAM)
    _set(dev, COPY_STREAM)
    _on_kernel_stream.discard(_key(dev))


def _copy_block(src: Any, dst: Any, src_offset: int, src_pitch: int, dst_offset: int,
                dst_pitch: int, width: int, height: int) -> None:
    """Copy ``height`` rows of ``width`` bytes, each ``src_pitch`` apart from byte
    ``src_offset`` of ``src``, to rows ``dst_pitch`` apart from ``dst_offset`` of ``dst``.

    A row block of an NCHW tensor is one such 2-D copy: ``height`` = N*C, ``width`` = the
    block's rows times W times the element size, the pitch the whole tensor's H*W*size.
    Between CPU tensors it is a numpy copy (the CPU pair's tests run it); otherwise a
    ``cudaMemcpy2DAsync`` that does not wait (the stream functions order it).
    """
    kinds = {int(t.device.dlpack_device_type()) for t in (src, dst)}
    if kinds == {CPU}:
        _host_rows(dst, dst_offset, dst_pitch, width, height)[...] = _host_rows(
            src, src_offset, src_pitch, width, height)
        return
    if not kinds <= {CPU, CUDA}:
        raise NotImplementedError(f"{COPY_BLOCK}: devices {sorted(kinds)}; CUDA and CPU only")
    gpu = src.device if int(src.device.dlpack_device_type()) == CUDA else dst.device
    stream = (kernel_stream(gpu) if kinds == {CUDA} and _key(gpu) in _on_kernel_stream
              else COPY_STREAM)
    err = _cudart().cudaMemcpy2DAsync(dst.data_ptr() + dst_offset, dst_pitch,
                                      src.data_ptr() + src_offset, src_pitch, width, height,
                                      MEMCPY_DEFAULT, stream)
    if err:
        raise RuntimeError(f"{COPY_BLOCK}: cudaMemcpy2DAsync failed with CUDA error {err}")


def _host_rows(t: Any, offset: int, pitch: int, width: int, height: int) -> np.ndarray:
    """The (height, width) bytes of a CPU tensor's rows as a numpy view."""
    nbytes = offset + (height - 1) * pitch + width
    raw = np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(t.data_ptr()))
    return np.lib.stride_tricks.as_strided(raw[offset:], (height, width), (pitch, 1))


_CUDART: list[ctypes.CDLL] = []
# newest first: the wheel's CUDA plugin links libcudart.so.13; PyTorch may load another beside it
_CUDART_NAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so")


def _cudart() -> ctypes.CDLL:
    """The CUDA runtime already loaded in this process (TVM's CUDA plugin loaded it), else
    the first one found."""
    if not _CUDART:
        for mode in (os.RTLD_NOLOAD | os.RTLD_LAZY, os.RTLD_LAZY):
            for name in _CUDART_NAMES:
                try:
                    lib = ctypes.CDLL(name, mode=mode)
                except OSError:
                    continue
                size = ctypes.c_size_t
                lib.cudaMemcpy2DAsync.argtypes = [ctypes.c_void_p, size, ctypes.c_void_p, size,
                                                  size, size, ctypes.c_int, ctypes.c_void_p]
                lib.cudaMemcpy2DAsync.restype = ctypes.c_int
                _CUDART.append(lib)
                return lib
        raise RuntimeError(f"{COPY_BLOCK}: no CUDA runtime library (libcudart) found")
    return _CUDART[0]


FUNCTIONS = {BEGIN: _begin, COPIES_WAIT: _copies_wait, KERNELS_WAIT: _kernels_wait,
             HOST_WAITS: _host_waits, END: _end, COPY_BLOCK: _copy_block}
IMPLEMENTATIONS = ("auto", "native", "python")
ENV = "CODL_TVM_STREAMS"
NATIVE_PREFIX = "codl.native."  # where codl_tvm.native registers its functions
_state: dict[str, Any] = {}


def use(implementation: str | None = None) -> str:
    """Register one implementation of the functions under their names; returns which.

    Parameters
    ----------
    implementation : {"auto", "native", "python"}, optional
        ``$CODL_TVM_STREAMS``, else ``auto``: native where :mod:`codl_tvm.native` builds,
        else Python (the reason is kept: :func:`implementation`).

    Raises
    ------
    ValueError
        An unknown name.
    RuntimeError
        ``native`` was asked for and cannot be built or loaded.
    """
    wanted = implementation or os.environ.get(ENV) or "auto"
    if wanted not in IMPLEMENTATIONS:
        raise ValueError(f"{ENV}={wanted!r}: expected one of {', '.join(IMPLEMENTATIONS)}")
    functions: dict[str, Callable[..., Any]] = dict(FUNCTIONS)
    chosen, reason = "python", "asked for" if wanted == "python" else ""
    if wanted != "python":
        try:
            from . import native

            native.register_streams(NATIVE_PREFIX)
            functions = {name: tvm.get_global_func(NATIVE_PREFIX + name.rsplit(".", 1)[-1])
                         for name in FUNCTIONS}
            chosen = "native"
            reason = "asked for" if wanted == "native" else "built for this machine"
        except (OSError, RuntimeError) as err:
            if wanted == "native":
                raise RuntimeError(f"{ENV}=native: {err}") from err
            reason = f"native functions unavailable: {err}"
    for name, func in functions.items():
        tvm.register_global_func(name, func, override=True)
    _state.update(implementation=chosen, reason=reason, copy_block=functions[COPY_BLOCK],
                  error=None)
    return chosen


def check() -> None:
    """Raise the problem that ``$CODL_TVM_STREAMS`` had when this module was imported (an
    unknown name, or ``native`` that could not be built): the Python functions run meanwhile,
    and loading a model (:class:`codl_tvm.runtime.Runner`) calls this, so a command says it in
    one line instead of an import failing."""
    if _state.get("error"):
        raise ValueError(_state["error"])


@contextmanager
def using(implementation: str) -> Iterator[str]:
    """:func:`use` ``implementation`` inside the block (the VMs made there call it), then the
    default again."""
    try:
        yield use(implementation)
    finally:
        use()


def implementation() -> tuple[str, str]:
    """The implementation in use (``native`` or ``python``) and why."""
    return _state["implementation"], _state["reason"]


def copy_block(src: Any, dst: Any, src_offset: int, src_pitch: int, dst_offset: int,
               dst_pitch: int, width: int, height: int) -> None:
    """Copy ``height`` rows of ``width`` bytes, each ``src_pitch`` apart from byte
    ``src_offset`` of ``src``, to rows ``dst_pitch`` apart from ``dst_offset`` of ``dst``,
    with the implementation in use (:func:`use`): what a split's VM code calls."""
    _state["copy_block"](src, dst, src_offset, src_pitch, dst_offset, dst_pitch, width, height)


try:
    use()
except (ValueError, RuntimeError) as _err:  # said where a model is loaded: check()
    use("python")
    _state.update(reason=str(_err), error=str(_err))
