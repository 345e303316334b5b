#!/usr/bin/env bash
# The same x86-cuda artifact run three ways on the H100 machine, which carries only the TVM
# runtime: (1) runtime-only in-process, (2) `python -m codl_tvm.runtime`,
# (3) over tvm.rpc on 127.0.0.1 (server: python -m codl_tvm.deploy.server, runtime-only).
# Same inputs everywhere; outputs compared to (1); times are medians of the VM time_evaluator
# (for RPC: timed on the server); the CPU pool's workers in-process and in the RPC session
# (the artifact's num-cores). Writes $OUT/deploy-h100.json and prints a table. < 3 min.
#
# Build here first (full TVM; no GPU needed), then pack the runtime:
#   PYTHONPATH=$PWD python3 -c 'import codl_tvm as c; from codl_tvm import zoo, Plan
#   m = c.load_model(str(zoo.get("tiny-cnn"))); pair = c.DevicePair("x86-cuda",
#     {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16}, {"kind": "cuda", "arch": "sm_90"})
#   c.compile(m, pair, Plan.uniform(m, "H", 0.9)).export(".devcarry/deploy-tiny-cnn")'
#   ../shared/gpu/pack-tvm-runtime.sh .devcarry
# Run there (device tool, with .devcarry carried):
#   mkdir -p /tmp/site && tar xzf .devcarry/tvm-runtime.tgz -C /tmp/site && export PYTHONPATH=/tmp/site:$PWD TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1; bash benchmarks/run_deploy_h100.sh
set -euo pipefail
ART=${ART:-.devcarry/deploy-tiny-cnn}
OUT=${OUT:-/tmp/deploy-out}
REPEAT=${REPEAT:-50}
export TVM_USE_RUNTIME_LIB=1 CODL_CUDA_ARCH=${CODL_CUDA_ARCH:-sm_90}
mkdir -p "$OUT"
work=$(mktemp -d)
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill -TERM -- "-$server_pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# (1) in-process, runtime-only; also writes the shared inputs
python3 - "$ART" "$work" "$REPEAT" <<'PY'
import json, sys, time
import numpy as np
from codl_tvm import runtime
art, work, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
assert "tvm.relax" not in sys.modules
t0 = time.perf_counter()
r = runtime.load(art)
load_s = time.perf_counter() - t0
x = r.random_inputs(0)
np.savez(f"{work}/x.npz", **x)
outs = r.run(x)
np.savez(f"{work}/inproc.npz", **{f"output_{i}": o for i, o in enumerate(outs)})
import tvm
json.dump({"median_ms": r.time(x, repeat=repeat) * 1e3, "load_s": load_s,
           "cpu_threads": r.cpu_threads,
           "tvm_num_threads": tvm.get_global_func("runtime.NumThreads")()},
          open(f"{work}/inproc.json", "w"))
PY

# (2) the runtime CLI in its own process
python3 -m codl_tvm.runtime "$ART" --inputs "$work/x.npz" -o "$work/cli.npz" --time \
  --repeat "$REPEAT" | tee "$work/cli.txt"

# (3) RPC over loopback: runtime-only server (own process group), runtime-only client
setsid python3 -m codl_tvm.deploy.server --host 127.0.0.1 --port 9090 \
  --port-file "$work/port" > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 600); do [ -f "$work/port" ] && break; sleep 0.1; done
python3 - "$ART" "$work" "$REPEAT" "127.0.0.1:$(cat "$work/port")" <<'PY'
import json, sys, time
import numpy as np
from codl_tvm.deploy import rpc
art, work, repeat, addr = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
t0 = time.perf_counter()
with rpc.load_remote(rpc.connect(rpc=addr, timeout_s=60), art) as r:
    load_s = time.perf_counter() - t0
    with np.load(f"{work}/x.npz") as npz:
        x = {k: npz[k] for k in npz.files}
    t1 = time.perf_counter()
    outs = r.run(x)
    run_roundtrip_ms = (time.perf_counter() - t1) * 1e3
    np.savez(f"{work}/rpc.npz", **{f"output_{i}": o for i, o in enumerate(outs)})
    json.dump({"median_ms": r.time(x, repeat=repeat) * 1e3, "load_s": load_s, "mode": r.mode,
               "run_roundtrip_ms": run_roundtrip_ms, "cpu_threads": r.cpu_threads},
              open(f"{work}/rpc.json", "w"))
PY

python3 - "$ART" "$work" "$OUT" <<'PY'
import json, re, sys
import numpy as np
art, work, out = sys.argv[1:4]
def load(name):
    with np.load(f"{work}/{name}.npz") as z:
        return [z[k] for k in sorted(z.files)]
ref = load("inproc")
def max_rel(name):
    return max(float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
               for a, b in zip(load(name), ref))
cli_ms = float(re.search(r"median latency: ([0-9.]+) ms", open(f"{work}/cli.txt").read())[1])
inproc, remote = json.load(open(f"{work}/inproc.json")), json.load(open(f"{work}/rpc.json"))
rows = [("runtime-only in-process", inproc["median_ms"], 0.0),
        ("python -m codl_tvm.runtime", cli_ms, max_rel("cli")),
        ("tvm.rpc loopback", remote["median_ms"], max_rel("rpc"))]
manifest = json.load(open(f"{art}/manifest.json"))
doc = {"artifact": art, "pair": manifest["pair"], "devices": manifest["devices"],
       "tvm_version": manifest["tvm_version"],
       "rows": [{"way": w, "median_ms": ms, "max_rel_err_vs_inproc": e} for w, ms, e in rows],
       "inproc": inproc, "rpc": remote}
json.dump(doc, open(f"{out}/deploy-h100.json", "w"), indent=1)
print(f"{'way':30s} {'median ms':>10s} {'max rel err':>12s}")
for w, ms, e in rows:
    print(f"{w:30s} {ms:10.3f} {e:12.2e}")
PY
