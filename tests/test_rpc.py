"""RPC execution against real ``tvm.rpc`` servers and a tracker on 127.0.0.1.

The servers run in runtime-only processes (``TVM_USE_RUNTIME_LIB=1``), as on a phone or the
GPU machine; every process is started in its own session and stopped by its process group id.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tvm
from helpers import conv, single_function
from tvm.relax import op as rop

import codl_tvm
from codl_tvm import Plan, runtime
from codl_tvm.cli import main as cli_main
from codl_tvm.deploy import rpc

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(args: list[str], tmp: Path, name: str) -> subprocess.Popen:
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", PYTHONPATH=str(ROOT))
    log = open(tmp / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, *args], env=env, stdout=log, stderr=log,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the group we created: server and its children
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _wait_port_file(path: Path, proc: subprocess.Popen) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if path.exists():
            return int(path.read_text())
        assert proc.poll() is None, f"server exited with {proc.returncode}"
        time.sleep(0.05)
    raise TimeoutError(f"no port file {path} after {START_TIMEOUT_S} s")


def _wait_listening(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"process exited with {proc.returncode}"
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


def _wait_accepting(port: int, proc: subprocess.Popen) -> None:
    """Wait with real RPC handshakes: a bare probe socket would break a tvm.rpc server's
    accept loop (it expects the RPC magic on every connection)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"server exited with {proc.returncode}"
        try:
            session = tvm.rpc.connect("127.0.0.1", port)
        except Exception:
            time.sleep(0.1)
            continue
        del session  # closes it; the server goes back to accepting
        return
    raise TimeoutError(f"no RPC server on 127.0.0.1:{port}")


def _model() -> tvm.IRModule:
    rng = np.random.default_rng(0)

    def body(bb, x):
        x = conv(bb, x, rng, 6, 3, padding=(1, 1, 1, 1), bias=True)
        return bb.emit(rop.nn.max_pool2d(x, (2, 2), (2, 2)))

    return codl_tvm.load_model(single_function((1, 3, 12, 12), body))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rpc")


@pytest.fixture(scope="module")
def artifact(work) -> Path:
    mod = _model()
    exe = codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"),
                           Plan.uniform(mod, "OC", 0.5))
    return exe.export(work / "art")


@pytest.fixture(scope="module")
def to_device_artifact(work) -> Path:
    """The split of ``artifact`` with TVM's own ``vm.builtin.to_device`` copies."""
    mod = _model()
    exe = codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"),
                           Plan.uniform(mod, "OC", 0.5), staging=False)
    return exe.export(work / "art-to-device")


@pytest.fixture(scope="module")
def gpu_only_artifact(work) -> Path:
    mod = _model()
    return codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair")).export(work / "art-gpu")


@pytest.fixture(scope="module")
def tracker(work):
    pytest.importorskip("tornado", reason="tvm.rpc's tracker needs tornado (test extra)")
    port = _free_port()
    proc = _spawn(["-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                   "--port-end", str(port + 1), "--silent"], work, "tracker")
    try:
        _wait_listening(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)


def _start_server(work: Path, name: str, extra: list[str]):
    port_file = work / f"{name}.port"
    proc = _spawn(["-m", "codl_tvm.deploy.server", "--port", str(_free_port()),
                   "--port-file", str(port_file), *extra], work, name)
    try:
        yield f"127.0.0.1:{_wait_port_file(port_file, proc)}"
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def server(work):
    """codl-tvm's server (runtime-only process), used directly."""
    yield from _start_server(work, "server", [])


@pytest.fixture(scope="module")
def tracked_server(work, tracker):
    """codl-tvm's server registered with the tracker under key 'codl-test'."""
    for address in _start_server(work, "tracked", ["--tracker", tracker, "--key", "codl-test"]):
        _wait_registered(tracker, "codl-test")
        yield address


def _wait_registered(tracker: str, key: str) -> None:
    host, port = rpc.parse_address(tracker)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        session = tvm.rpc.connect_tracker(host, port)
        try:
            if key in session.summary().get("queue_info", {}):
                return
        finally:
            session.close()
        time.sleep(0.1)
    raise TimeoutError(f"no server registered under {key!r}")



@pytest.fixture(scope="module")
def stock_server(work):
    port = _free_port()
    proc = _spawn(["-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(port),
                   "--port-end", str(port + 1), "--silent"], work, "stock")
    try:
        _wait_accepting(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)


def _local(art: Path, seed: int = 3) -> tuple[dict, list[np.ndarray]]:
    runner = runtime.load(art)
    inputs = runner.random_inputs(seed)
    return inputs, runner.run(inputs)


def test_direct_server_gives_the_local_outputs_and_a_remote_time(server, artifact):
    inputs, expected = _local(artifact)
    runner = rpc.load_remote(rpc.connect(rpc=server), artifact)
    assert runner.mode == "helpers"
    # the weights sit on the remote device of their role: llvm:0 for the CPU, llvm:1 for the GPU
    roles = [p["role"] for p in runner.manifest["params"] + runner.manifest["staging"]]
    assert [t.device.index for t in runner.params] == [0 if r == "cpu" else 1 for r in roles]
    outputs = runner.run(inputs)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        np.testing.assert_array_equal(got, want)
    seconds = runner.time(inputs, repeat=3)
    assert np.isfinite(seconds) and seconds > 0


@pytest.fixture(scope="module")
def spawn_server(work):
    """Sessions spawned instead of forked, as where a CUDA driver is present (the H100 machine:
    a forked session cannot initialise CUDA there)."""
    yield from _start_server(work, "spawned", ["--spawn"])


def test_a_guarded_artifact_runs_the_fastest_build_timed_on_the_remote(server, work):
    mod = _model()
    exe = codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"),
                           Plan.uniform(mod, "H", 0.5), guard=True)
    art = exe.export(work / "art-guarded")
    inputs = exe.random_inputs(3)
    with rpc.load_remote(rpc.connect(rpc=server), art) as runner:
        assert set(runner.choice["latency_ms"]) == {"plan", "gpu-only", "cpu-only"}
        np.testing.assert_allclose(runner.run(inputs)[0], exe.run(inputs)[0], rtol=1e-5,
                                   atol=1e-6)


def test_spawned_sessions_set_themselves_up(spawn_server, artifact):
    inputs, expected = _local(artifact)
    with rpc.load_remote(rpc.connect(rpc=spawn_server), artifact) as runner:
        assert runner.mode == "helpers"
        for out, ref in zip(runner.run(inputs), expected):
            np.testing.assert_array_equal(out, ref)


def test_tracker_hands_out_the_server_by_key(tracked_server, tracker, artifact):
    inputs, expected = _local(artifact, seed=4)
    session = rpc.connect(tracker=tracker, key="codl-test", timeout_s=30)
    np.testing.assert_array_equal(rpc.load_remote(session, artifact).run(inputs)[0], expected[0])


def test_the_remote_cpu_pool_takes_the_pairs_num_cores(server, artifact):
    cores = json.loads((artifact / "manifest.json").read_text())["pair"]["cpu"]["num-cores"]
    with rpc.load_remote(rpc.connect(rpc=server), artifact) as runner:
        assert runner.cpu_threads == cores
        assert runner.session.get_function("runtime.NumThreads")() == cores


def test_cli_run_over_rpc_writes_the_local_outputs(server, artifact, work, capsys):
    inputs, expected = _local(artifact, seed=5)
    np.savez(work / "x.npz", **inputs)
    rc = cli_main(["run", str(artifact), "--rpc", server, "--inputs", str(work / "x.npz"),
                   "-o", str(work / "out.npz"), "--time", "--repeat", "2"])
    assert rc == 0
    assert "median latency (remote)" in capsys.readouterr().out
    with np.load(work / "out.npz") as out:
        np.testing.assert_array_equal(out["output_0"], expected[0])


def test_stock_server_direct_call_rejects_dltensor_so_the_helpers_are_needed(
        stock_server, to_device_artifact):
    """Over RPC a tensor reaches the server as DLTensor*; TVM's ``vm.builtin.to_device`` wants
    an ffi.Tensor (staged copies take either, but the helpers serve every artifact)."""
    artifact = to_device_artifact
    session = rpc.connect(rpc=stock_server)
    session.upload(str(artifact / "lib.so"), target="probe.so")
    devs = [session.cpu(1), session.cpu(0)]
    vm = tvm.runtime.vm.VirtualMachine(session.load_module("probe.so"), devs)
    manifest = json.loads((artifact / "manifest.json").read_text())
    args = [tvm.runtime.tensor(np.zeros(s["shape"], s["dtype"]), devs[s["role"] == "cpu"])
            for s in manifest["inputs"] + manifest["params"] + manifest["staging"]]
    raised = None
    try:
        vm["main"](*args)
    except Exception as err:  # noqa: BLE001 - inspected below
        raised = str(err)
    del vm, args, session  # one session at a time: free the server for the next test
    assert raised is not None and "DLTensor" in raised


def test_stock_server_runs_a_devices0_artifact_and_refuses_a_split_one(
        stock_server, gpu_only_artifact, artifact):
    inputs, expected = _local(gpu_only_artifact, seed=6)
    runner = rpc.load_remote(rpc.connect(rpc=stock_server), gpu_only_artifact)
    assert runner.mode == "stateful"
    np.testing.assert_array_equal(runner.run(inputs)[0], expected[0])
    runner.close()  # one session at a time
    with pytest.raises(rpc.RPCError, match="devices\\[0\\]"):
        rpc.load_remote(rpc.connect(rpc=stock_server), artifact)


def test_connection_refused_is_one_line_and_exit_1(artifact, capsys):
    port = _free_port()  # nothing listens there
    with pytest.raises(rpc.RPCError, match="connection refused"):
        rpc.connect(rpc=f"127.0.0.1:{port}", timeout_s=5)
    assert cli_main(["run", str(artifact), "--rpc", f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "connection refused" in err


def test_a_server_that_never_answers_times_out():
    with socket.socket() as silent:  # accepts into the backlog, never speaks RPC
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        start = time.monotonic()
        with pytest.raises(rpc.RPCError, match="no answer within 1 s"):
            rpc.connect(rpc=f"127.0.0.1:{silent.getsockname()[1]}", timeout_s=1)
        assert time.monotonic() - start < 10


def test_a_device_the_remote_lacks(server, artifact, work, capsys):
    art = work / "needs-cuda"
    shutil.copytree(artifact, art, dirs_exist_ok=True)
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["devices"][0] = ["cuda", 0]
    (art / "manifest.json").write_text(json.dumps(manifest))
    if tvm.cuda(0).exist:
        pytest.skip("this machine has a CUDA GPU, so the remote has the device")
    assert cli_main(["run", str(art), "--rpc", server]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "remote has no cuda:0 device" in err


def test_tracker_without_the_key(tracker, tracked_server):
    with pytest.raises(rpc.RPCError, match="no server with key 'no-such-phone'"):
        rpc.connect(tracker=tracker, key="no-such-phone", timeout_s=5)


def test_bad_addresses():
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        rpc.connect(rpc="localhost")
    with pytest.raises(ValueError, match="--rpc-key"):
        rpc.connect(tracker="127.0.0.1:9190")


def test_bench_times_every_plan_on_the_remote(server):
    from codl_tvm.planner.bench import bench

    mod = _model()
    pair = codl_tvm.DevicePair.preset("cpu-pair")
    rows = bench(mod, pair, ["cpu-only", "gpu-only"], None, rounds=2,
                 session=rpc.connect(rpc=server))
    assert {r["plan"] for r in rows} == {"cpu-only", "gpu-only"}
    assert all(r["latency_ms"] > 0 and r["max_rel_err"] <= 1e-5 for r in rows)


def test_an_rpc_profile_takes_the_servers_cpu_facts(server, stock_server):
    """Over RPC the CPU facts beside the samples are the server machine's, read through the
    codl server's ``codl.rpc.machine_facts``; a stock TVM server has none to give."""
    from codl_tvm.profiler import machine_facts
    from codl_tvm.profiler.measure import Session

    facts = Session(rpc=server).remote_cpu_facts()
    local = machine_facts.detect(None)
    assert facts["cpu_logical"] == local["cpu_logical"] and facts["cpu_model"] == local["cpu_model"]
    assert Session(rpc=stock_server).remote_cpu_facts() == {}


def test_cli_rpc_server_spawned_sessions_set_themselves_up(work, artifact):
    """Regression: ``codl-tvm rpc-server`` (the console script, not ``-m``) spawned sessions
    that imported the script as their main module and never registered the helpers."""
    port_file = work / "cli-spawned.port"
    script = ("import sys; from codl_tvm.cli import main; "
              "sys.argv[0] = 'codl-tvm'; sys.exit(main())")  # what the console script runs
    proc = _spawn(["-c", script, "rpc-server", "--spawn", "--port", str(_free_port()),
                   "--port-file", str(port_file)], work, "cli-spawned")
    try:
        address = f"127.0.0.1:{_wait_port_file(port_file, proc)}"
        inputs, expected = _local(artifact, seed=8)
        with rpc.load_remote(rpc.connect(rpc=address), artifact) as runner:
            assert runner.mode == "helpers"
            for out, ref in zip(runner.run(inputs), expected, strict=True):
                np.testing.assert_array_equal(out, ref)
    finally:
        _stop(proc)
