"""``python -m codl_tvm.deploy.server``: a TVM RPC server that co-executes codl-tvm artifacts.

A stock ``tvm.rpc`` server (``python -m tvm.exec.rpc_server``, the Android ``tvm_rpc`` app) in
the same process as codl-tvm's :mod:`.rpc_helpers` and, where CUDA is present, the runtime-only
CUDA setup of :func:`codl_tvm.runtime.enable_cuda` (and OpenCL's plugin, where it is
installed: :func:`codl_tvm.opencl_runtime.load_plugin`). Runs with only the TVM runtime::

    TVM_USE_RUNTIME_LIB=1 python -m codl_tvm.deploy.server --host 127.0.0.1 --port 9090
    ... --tracker HOST:PORT --key KEY      # register with a tracker instead of direct use

(the arguments of ``codl-tvm rpc-server``: :func:`codl_tvm.commands.artifact.server_main`).

It listens on 127.0.0.1 unless told otherwise: a TVM RPC server runs any code a client sends.
Sessions are served one at a time, each in its own process: forked (TVM's behaviour), or
spawned where a CUDA driver is present (``--spawn`` forces it).
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import sys
from pathlib import Path


def start(host: str = "127.0.0.1", port: int = 9090, port_end: int | None = None,
          tracker: str | None = None, key: str = "", silent: bool = True,
          spawn: bool | None = None) -> object:
    """Register the helpers and start serving in a background thread of this process.

    Ports ``port`` to ``port_end`` (default ``port + 100``) are tried in turn. Returns the
    ``tvm.rpc.server.PopenRPCServerState`` (``.port`` is the bound port,
    ``.thread`` the listening thread). ``spawn`` (default: when a CUDA driver is present) starts
    each session as a fresh process instead of a fork.
    """
    from tvm.rpc.server import PopenRPCServerState

    from ..opencl_runtime import load_plugin
    from . import rpc_helpers
    from .rpc import parse_address

    spawn = _cuda_driver() if spawn is None else spawn
    if spawn:
        multiprocessing.set_start_method("spawn", force=True)
        _sessions_import_this_module()
    rpc_helpers.register()
    load_plugin()  # a forked session inherits it; no OpenCL device is touched before the fork
    tracker_addr = parse_address(tracker, "--tracker") if tracker else None
    if tracker_addr and not key:
        raise ValueError("--tracker needs --key: the tracker hands servers out by key")
    port_end = port_end if port_end is not None else port + 100
    return PopenRPCServerState(host, port, port_end, False, tracker_addr, key, None, None,
                               silent)


def _sessions_import_this_module() -> None:
    """A spawned session imports its parent's main module as ``__mp_main__``; make that this
    module, whose import sets the session up (below), whatever the parent ran: under
    ``codl-tvm rpc-server`` the main module is the console script, and sessions came up
    without the helpers."""
    main = sys.modules["__main__"]
    if getattr(getattr(main, "__spec__", None), "name", None) != "codl_tvm.deploy.server":
        main.__spec__ = importlib.util.find_spec("codl_tvm.deploy.server")


def _cuda_driver() -> bool:
    import ctypes.util
    import os

    import tvm

    lib = Path(tvm.__file__).parent / "lib" / "libtvm_runtime_cuda.so"
    runtime_only = os.environ.get("TVM_USE_RUNTIME_LIB") == "1"
    return runtime_only and lib.exists() and ctypes.util.find_library("cuda") is not None


def _session_setup() -> None:
    """What every session process needs: our RPC helpers and, where there is a GPU, CUDA; and
    OpenCL where its runtime plugin is installed (``tools/opencl-runtime/build.sh``)."""
    from .. import runtime
    from ..opencl_runtime import load_plugin
    from . import rpc_helpers

    rpc_helpers.register()
    if _cuda_driver():
        runtime.enable_cuda()
    load_plugin()


# Seen on the H100 machine: a forked process cannot initialise CUDA once its parent has
# imported TVM's runtime (cudaErrorInitializationError), even if the parent never used the GPU.
# So with a CUDA driver the sessions are spawned; a spawned session re-imports this module as
# ``__mp_main__`` and sets itself up here.
if __name__ == "__mp_main__":
    _session_setup()


if __name__ == "__main__":
    from codl_tvm.commands.artifact import server_main

    sys.exit(server_main())
