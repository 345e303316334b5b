"""Tutorial 4: cross-compile for an Android phone (CPU + OpenCL GPU) and run over TVM RPC.

The same plan compiles for a phone: its big CPU cores through LLVM (aarch64) and its GPU
through OpenCL. Here we only cross-compile for the phone (nothing Android runs on this host),
then show the RPC path end to end against a local RPC server on this machine's ``cpu-pair``.
On a real phone, start ``python -m codl_tvm.deploy.server`` there (TVM runtime only) or use
TVM's Android RPC app, and point ``connect`` at it (or at a tracker with a key).

Run it::

    python tutorials/04_android_opencl_rpc.py --quick

Shell twins: ``codl-tvm compile MODEL --pair android-opencl --plan plan.json -o ART``,
``codl-tvm run ART --rpc HOST:PORT``.
"""

# %%
# Setup: the model and a plan (uniform here; tutorial 3 shows how to plan with a predictor).
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import codl_tvm
from codl_tvm import zoo
from codl_tvm.deploy import cross, rpc

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true", help="few timing repeats")
parser.add_argument("--out", default=None, help="working folder (default: a temporary one)")
args = parser.parse_args()
out = Path(args.out or tempfile.mkdtemp(prefix="codl-tutorial4-"))
mod = codl_tvm.load_model(zoo.get("tiny-cnn"))
plan = codl_tvm.Plan.uniform(mod, "OC", 0.5)

# %%
# Cross-compile. ``android-opencl`` pairs an aarch64 LLVM CPU target with an OpenCL GPU target
# (``android-adreno`` tunes for Adreno GPUs). Compiling needs no phone.
phone = codl_tvm.DevicePair.preset("android-opencl")
print(f"CPU target: {phone.cpu_target}\nGPU target: {phone.gpu_target}")
exe = codl_tvm.compile(mod, phone, plan)

# %%
# Export for the device. With the Android NDK's compiler (``TVM_NDK_CC`` or ``ndk_cc=``) this
# writes a ready ``.so``; without one, a ``.tar`` of objects and the command to link it.
art = cross.export_for_device(exe, out / "tiny-cnn-android")
manifest = (art / "manifest.json").read_text()
print(f"wrote {art}: {sorted(p.name for p in art.iterdir())}")
assert "opencl" in manifest

# %%
# RPC, end to end, on this machine: start a codl-tvm RPC server (on a phone you would run
# ``python -m codl_tvm.deploy.server --host 0.0.0.0`` there), build the artifact for the pair
# the server has (here ``cpu-pair``), upload it and run it remotely.
port_file = out / "rpc-port"
server = subprocess.Popen([sys.executable, "-m", "codl_tvm.deploy.server", "--port", "9190",
                           "--port-file", str(port_file)])
for _ in range(600):  # the server writes its port once it listens
    if port_file.exists() or server.poll() is not None:
        break
    time.sleep(0.1)
if not port_file.exists():
    server.kill()
    raise SystemExit("the RPC server did not start")
port = int(port_file.read_text())
print(f"RPC server on 127.0.0.1:{port}")
local = codl_tvm.DevicePair.preset("cpu-pair")
host_exe = codl_tvm.compile(mod, local, plan)
host_art = host_exe.export(out / "tiny-cnn-cpu-pair")
session = rpc.connect(rpc=f"127.0.0.1:{port}")
remote = rpc.load_remote(session, host_art)

# %%
# The remote run gives the local answer; timing runs on the remote device too.
try:
    inputs = host_exe.random_inputs(seed=0)
    (y_remote,) = remote.run(inputs)
    (y_local,) = host_exe.run(inputs)
    assert np.allclose(y_remote, y_local, rtol=1e-5, atol=1e-6)
    repeat = 3 if args.quick else 20
    print(f"remote run matches; median {remote.time(inputs, repeat=repeat) * 1e3:.3f} ms "
          "over RPC")
finally:
    server.terminate()
    server.wait(timeout=30)
