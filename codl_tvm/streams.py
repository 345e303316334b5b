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

Each is a Python function registered with TVM's FFI; a call from the VM costs about 0.2 us
(measured) plus the CUDA call. On a CPU device they do nothing, which is what the CPU pair's
tests run. Importing this module registers them; :mod:`codl_tvm.runtime` does.
"""

from __future__ import annotations

from typing import Any

import tvm

BEGIN = "codl.streams.begin"
COPIES_WAIT = "codl.streams.copies_wait_for_kernels"
KERNELS_WAIT = "codl.streams.kernels_wait_for_copies"
HOST_WAITS = "codl.streams.host_waits_for_copies"
END = "codl.streams.end"
COPY_STREAM = 0  # the legacy default stream, where TVM's copies run

_create = tvm.get_global_func("runtime.Device_StreamCreate")
_set = tvm.get_global_func("runtime.Device_SetStream")
_sync = tvm.get_global_func("runtime.Device_StreamSync")
_order = tvm.get_global_func("runtime.Device_StreamSyncFromTo")  # (dev, first, then)
_kernel_streams: dict[tuple[int, int], int] = {}


def kernel_stream(dev: Any) -> int:
    """The kernel stream of ``dev`` (a non-blocking stream, made once per process)."""
    key = (int(dev.dlpack_device_type()), int(dev.index))
    if key not in _kernel_streams:
        _kernel_streams[key] = int(_create(dev))
    return _kernel_streams[key]


def _begin(t: Any) -> None:
    dev = t.device
    _sync(dev, COPY_STREAM)
    stream = kernel_stream(dev)
    _set(dev, stream)
    _order(dev, COPY_STREAM, stream)


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


FUNCTIONS = {BEGIN: _begin, COPIES_WAIT: _copies_wait, KERNELS_WAIT: _kernels_wait,
             HOST_WAITS: _host_waits, END: _end}
for _name, _func in FUNCTIONS.items():
    tvm.register_global_func(_name, _func, override=True)
