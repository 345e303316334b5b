"""Run codl-tvm artifacts on a remote machine through ``tvm.rpc``.

The host keeps the manifest and drives the run; the library is uploaded, the weights and inputs
are copied straight onto the remote device each argument needs, outputs come back as numpy::

    sess = connect(rpc="127.0.0.1:9090")               # or tracker="HOST:PORT", key="KEY"
    runner = load_remote(sess, "art/")
    outputs = runner.run(runner.random_inputs())
    seconds = runner.time(inputs)                      # timed on the remote

Calling ``main`` needs the helpers of :mod:`.rpc_helpers` in the server process (start it with
``python -m codl_tvm.deploy.server``). A stock TVM server can still run an artifact whose
arguments all live on ``devices[0]`` (through ``set_input``, which moves everything there);
anything else is refused with the reason. Works with the TVM runtime only.
"""

from __future__ import annotations

import gc
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import tvm
import tvm.runtime.vm

from .. import runtime
from ..profiler.cpu_pool import use_cpu_threads

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 30.0
_RPC_SESS_MASK = 128  # tvm.rpc.base.RPC_SESS_MASK: remote device types are offset by it
# manifest device kind -> RPCSession method
_REMOTE_DEVICES = {"cpu": "cpu", "cuda": "cuda", "opencl": "cl"}


class RPCError(RuntimeError):
    """Connecting to or running on the remote failed; the message says which and why."""


def parse_address(text: str, what: str = "address") -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port), with a message naming the flag on bad input."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{what} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9090")
    return host, int(port)


def _with_deadline(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """Run ``fn`` in a daemon thread; TVM's socket calls have no timeout of their own."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # re-raised in the caller's thread
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True, name="codl-rpc-connect")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise RPCError(f"{what}: no answer within {timeout_s:g} s "
                       "(server busy with another session, or a firewall drops packets)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def connect(rpc: str | None = None, tracker: str | None = None, key: str | None = None,
            timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """Open a ``tvm.rpc`` session, directly or through a tracker.

    Parameters
    ----------
    rpc : str, optional
        ``HOST:PORT`` of a server.
    tracker, key : str, optional
        ``HOST:PORT`` of a tracker and the device key to request from it.
    timeout_s : float
        Bound on connecting (and on waiting for a free server of ``key``).

    Raises
    ------
    RPCError
        Connection refused, no answer in time, or the tracker has no server of that key.
    """
    from tvm import rpc as tvm_rpc

    if (rpc is None) == (tracker is None):
        raise ValueError("give exactly one of --rpc HOST:PORT or --rpc-tracker HOST:PORT")
    if rpc is not None:
        host, port = parse_address(rpc, "--rpc")
        where = f"RPC server {host}:{port}"
        fn = lambda: tvm_rpc.connect(host, port)  # noqa: E731
    else:
        if not key:
            raise ValueError("--rpc-tracker needs --rpc-key: the tracker hands out servers by key")
        host, port = parse_address(tracker, "--rpc-tracker")
        where = f"RPC tracker {host}:{port} (key {key!r})"
        fn = lambda: _request(tvm_rpc, host, port, key, timeout_s)  # noqa: E731
    try:
        return _with_deadline(fn, timeout_s, f"cannot reach {where}")
    except RPCError:
        raise
    except Exception as err:  # TVM raises InternalError/RuntimeError/OSError with long texts
        raise RPCError(f"cannot reach {where}: {_reason(err)}") from None


def _request(tvm_rpc: Any, host: str, port: int, key: str, timeout_s: float) -> Any:
    from tvm.rpc import base

    sock = base.socket.create_connection((host, port), timeout=timeout_s)
    sock.close()  # the tracker answers probes; TrackerSession itself retries for 60 s
    tracker = tvm_rpc.connect_tracker(host, port)
    servers = tracker.summary().get("queue_info", {})
    if key not in servers:
        raise RPCError(f"the tracker has no server with key {key!r} (keys: {sorted(servers)})")
    tracker._sock.settimeout(timeout_s)  # a REQUEST waits for a free server otherwise forever
    return tracker.request(key, max_retry=1)


def _reason(err: BaseException) -> str:
    text = str(err)
    if "Connect to" in text and "failed" in text or isinstance(err, ConnectionRefusedError):
        return "connection refused (is the server running and the port right?)"
    if isinstance(err, TimeoutError) or "timed out" in text:
        return "timed out"
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


def remote_device(session: Any, kind: str, index: int, pair: str = "?") -> Any:
    """The remote device of a manifest entry; RPCError when the remote lacks it."""
    if kind not in _REMOTE_DEVICES:
        raise RPCError(f"unknown device kind {kind!r} in the artifact manifest")
    dev = getattr(session, _REMOTE_DEVICES[kind])(index)
    try:
        exists = bool(dev.exist)
    except Exception:  # the remote runtime was built without this device API
        exists = False
    if not exists:
        raise RPCError(f"the remote has no {kind}:{index} device, which the artifact needs "
                       f"(built for pair {pair})")
    return dev


class RemoteRunner(runtime.Runner):
    """:class:`codl_tvm.runtime.Runner` on remote devices (same ``run``/``time`` contract).

    Parameters
    ----------
    session : tvm.rpc.RPCSession
        From :func:`connect`.
    library : path-like
        The artifact's ``lib.so`` (uploaded once per runner).
    manifest, params : dict
        As for :class:`~codl_tvm.runtime.Runner`; params are copied to their remote devices once.
    """

    def __init__(self, session: Any, library: str | os.PathLike, manifest: dict[str, Any],
                 params: dict[str, np.ndarray]):
        self.session, self.manifest = session, manifest
        self.choice: dict[str, Any] | None = None  # as runtime.Runner's (a guarded artifact)
        pair = manifest.get("pair", {}).get("name", "?")
        self.devices = [remote_device(session, kind, index, pair)
                        for kind, index in manifest["devices"]]
        self.cpu_threads = use_cpu_threads(runtime.cpu_threads(manifest), session)
        remote_name = f"codl-{os.getpid()}-{id(self)}.so"
        session.upload(str(library), target=remote_name)
        self.vm = tvm.runtime.vm.VirtualMachine(session.load_module(remote_name), self.devices)
        self.params = runtime.upload_params(self.vm, manifest, params, self._dev,
                                            self._remote_items)
        # staging buffers in the remote's plain host memory (pinning needs a local CUDA)
        self.params += [tvm.runtime.empty(s["shape"], s["dtype"], self._dev(s["role"]))
                        for s in manifest.get("staging", [])]
        self.mode = self._pick_mode()
        if self.mode == "helpers":
            self._key = session.get_function("codl.rpc.bind")(*self.params)

    def close(self) -> None:
        """Drop every remote handle so the session ends (a server serves one at a time)."""
        self.vm = self.params = self.session = self.devices = None
        gc.collect()  # remote handles in reference cycles would keep the session open

    def __enter__(self) -> RemoteRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pick_mode(self) -> str:
        try:
            self.session.get_function("codl.rpc.version")
            return "helpers"
        except Exception:  # AttributeError "Module has no function" from a stock server
            pass
        roles = {s["role"] for s in self.manifest["inputs"] + self.manifest["params"]
                 + self.manifest.get("staging", [])}
        if roles <= {"gpu"}:
            return "stateful"
        raise RPCError("the RPC server lacks codl-tvm's helpers and this artifact has arguments "
                       "on the CPU: a stock server would move them to devices[0] "
                       "(apache/tvm#17884); start the server with python -m codl_tvm.deploy.server")

    def _remote_items(self, ref: Any) -> list[Any]:
        """The elements of a remote array (a tuple a remote function returned)."""
        size = self.session.get_function("ffi.ArraySize")
        item = self.session.get_function("ffi.ArrayGetItem")
        return [item(ref, i) for i in range(size(ref))]

    def _remote_inputs(self, inputs: dict[str, np.ndarray]) -> list[Any]:
        return self._args(inputs)[: len(self.manifest["inputs"])]

    def run(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run once on the remote; outputs as numpy arrays in model order."""
        if self.mode == "stateful":
            self.vm.set_input("main", *self._args(inputs))
            self.vm.invoke_stateful("main")
            return runtime._flatten(self.vm.get_outputs("main"))
        ref = self.session.get_function("codl.rpc.call")(
            self.vm.module, self._key, *self._remote_inputs(inputs))
        return [t.numpy() for t in self._remote_items(ref)]

    def time(self, inputs: dict[str, np.ndarray], repeat: int = 20, number: int = 1) -> float:
        """Median seconds of one inference, timed on the remote (one warm-up discarded)."""
        dev = self.devices[0]
        if self.mode == "stateful":
            self.vm.set_input("main", *self._args(inputs))
            timer = self.vm.time_evaluator("invoke_stateful", dev, number=number, repeat=repeat)
            return float(np.median(timer("main").results))
        blob = self.session.get_function("codl.rpc.time")(
            self.vm.module, self._key, dev.dlpack_device_type() % _RPC_SESS_MASK, dev.index,
            number, repeat, *self._remote_inputs(inputs))
        return float(np.median(json.loads(blob)))


def load_remote(session: Any, path: str | os.PathLike, choose: bool = True) -> RemoteRunner:
    """Load an artifact folder (as :func:`codl_tvm.runtime.load`) onto the remote of ``session``;
    a guarded artifact (``compile(..., guard=True)``) runs the fastest of the plan and its
    alternatives, timed on the remote (unless ``choose`` is False)."""
    path = Path(path)
    manifest = _read_manifest(path)
    library = path / manifest.get("library", runtime.LIBRARY)
    if library.suffix != ".so":
        raise RPCError(f"{path}: the library is {library.name}; link it first "
                       f"({manifest.get('link', 'see docs/DEPLOY.md')})")
    if manifest.get("weights") == "random":
        params = runtime.random_weights(manifest)
    else:
        with np.load(path / runtime.PARAMS, allow_pickle=False) as npz:
            params = {k: npz[k] for k in npz.files}
    runner = RemoteRunner(session, library, manifest, params)
    alternatives = manifest.get("alternatives", [])
    if not (choose and alternatives):
        return runner
    runners = {"plan": runner} | {a["name"]: load_remote(session, path / a["dir"], choose=False)
                                  for a in alternatives}
    chosen = runtime.fastest(runners)
    for other in runners.values():
        if other is not chosen:
            other.close()  # its remote handles would keep the session open
    return chosen


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((path / runtime.MANIFEST).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is not a codl-tvm artifact (no {runtime.MANIFEST})"
                                ) from None
    if (manifest.get("format") != runtime.ARTIFACT_FORMAT
            or manifest.get("version") not in runtime.READABLE_VERSIONS):
        raise ValueError(f"{path}: unsupported artifact format/version")
    return manifest
