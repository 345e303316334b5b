"""Server-side helpers that let an RPC client call the co-executed ``main`` correctly.

Why they exist (checked on TVM 0.27.0.post1): over RPC every tensor argument reaches the server
as a bare ``DLTensor*``. The Relax VM's ``main`` rejects it ("Cannot convert from type
``DLTensor*`` to ``ffi.Tensor``"), and the only stock entry points that accept it
(``set_input``, ``save_function``) copy every argument to ``devices[0]`` (apache/tvm#17884), so
the CPU weights of a co-executed model would land on the GPU. These helpers, registered in the
server process, turn each ``DLTensor*`` into a tensor owned by the server **on the device the
client put it on**, and call ``main`` with those.

Registered global functions (all take the VM module the client created remotely):

- ``codl.rpc.version() -> int``
- ``codl.rpc.bind(*tensors) -> int``: keep server-owned copies of the weights; returns a key.
- ``codl.rpc.call(vm, key, *inputs) -> Array``: ``main(*inputs, *weights[key])``, flattened.
- ``codl.rpc.time(vm, key, dev_type, dev_id, number, repeat, *inputs) -> str``: JSON list of
  seconds from the VM's ``time_evaluator`` (one discarded warm-up), timed on the server.
- ``codl.rpc.cpu_threads(n) -> int``: size the session's CPU pool to ``n`` workers before its
  first CPU kernel (:mod:`codl_tvm.profiler.cpu_pool`); returns the workers it runs. TVM's
  ``runtime.config_threadpool`` cannot do it over RPC: without its CPU list argument (an
  Array, which RPC cannot pass) it stays within TVM's default, half the CPUs on x86.

Works in a runtime-only process (``TVM_USE_RUNTIME_LIB=1``).
"""

from __future__ import annotations

import json
from typing import Any

import tvm
import tvm.runtime.vm  # noqa: F401 - registers the VM module methods used below
import tvm_ffi

HELPER_VERSION = 2  # 2: codl.rpc.cpu_threads
_BOUND: dict[int, list[Any]] = {}


def _owned(view: Any) -> Any:
    """A server-owned copy of a tensor argument, on the device the client allocated it on."""
    out = tvm.runtime.empty(tuple(view.shape), view.dtype, view.device)
    out.copyfrom(view)
    return out


def _flatten(value: Any) -> list[Any]:
    if hasattr(value, "shape") and hasattr(value, "device"):
        return [value]
    items: list[Any] = []
    for item in value:
        items.extend(_flatten(item))
    return items


def _version() -> int:
    return HELPER_VERSION


def _bind(*tensors: Any) -> int:
    key = len(_BOUND) + 1
    _BOUND[key] = [_owned(t) for t in tensors]
    return key


def _args(key: int, inputs: tuple[Any, ...]) -> list[Any]:
    if key not in _BOUND:
        raise KeyError(f"codl.rpc: unknown weight key {key}")
    return [_owned(t) for t in inputs] + _BOUND[key]


def _call(vm: Any, key: int, *inputs: Any) -> Any:
    out = vm["main"](*_args(key, inputs))
    return tvm_ffi.convert(_flatten(out))


def _time(vm: Any, key: int, dev_type: int, dev_id: int, number: int, repeat: int,
          *inputs: Any) -> str:
    dev = tvm.runtime.device(dev_type, dev_id)
    timer = tvm.runtime.Module.time_evaluator(vm, "main", dev, number=number, repeat=repeat)
    return json.dumps(list(timer(*_args(key, inputs)).results))


def _cpu_threads(n: int) -> int:
    from ..profiler.cpu_pool import use_cpu_threads

    return int(use_cpu_threads(n) or 0)


def _machine_facts() -> str:
    """The server machine's CPU facts (model, logical CPUs, caches) as JSON: an RPC profile
    stores the target's, not the host's."""
    from ..profiler import machine_facts

    return json.dumps(machine_facts.detect(None, host=True))


FUNCTIONS = {
    "codl.rpc.version": _version,
    "codl.rpc.machine_facts": _machine_facts,
    "codl.rpc.bind": _bind,
    "codl.rpc.call": _call,
    "codl.rpc.time": _time,
    "codl.rpc.cpu_threads": _cpu_threads,
}


def register() -> None:
    """Register the helpers in this process (idempotent), with the stream functions that
    split artifacts for CUDA call (:mod:`codl_tvm.streams`, registered on import)."""
    from .. import streams  # noqa: F401

    for name, func in FUNCTIONS.items():
        tvm_ffi.register_global_func(name, func, override=True)
