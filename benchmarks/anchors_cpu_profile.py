"""Where a CPU-only anchors model spends its time, VM call by VM call, beside onnxruntime.

    python benchmarks/anchors_cpu_profile.py ARTIFACTS MODEL [--threads 16] [--top 30] [--json F]

``ARTIFACTS`` is an ``anchors.py build`` folder; runs with a runtime-only TVM (the GPU
machine). The model runs with the anchors' seeded weights (drawn here). Prints codl-tvm's and
onnxruntime's medians at ``--threads`` workers, then every VM call's time per run (kernels and
the VM's builtins, with the shapes of their arguments) through the Relax VM's instrument, and
onnxruntime's nodes through its own profiler. Both profilers add a few microseconds per call;
the medians above them are the unprofiled latencies.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

RUNS = 20


def median_ms(fn: Callable[[], Any], runs: int = 60) -> float:
    """Median wall time of ``fn`` in milliseconds, after 15 warm-up calls."""
    for _ in range(15):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def ort_nodes(model: Path, inputs: dict, threads: int, tmp: Path) -> dict[str, float]:
    """onnxruntime's microseconds per run of each node, from its profiler."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.enable_profiling, so.profile_file_prefix = True, str(tmp / "ort-profile")
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    for _ in range(RUNS):
        sess.run(None, inputs)
    nodes: dict[str, float] = defaultdict(float)
    for e in json.loads(Path(sess.end_profiling()).read_text()):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            nodes[f"{e['args'].get('op_name', '?')} {e['name'][:-12]}"] += e["dur"] / RUNS
    return dict(nodes)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("artifacts")
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--json", help="also write every row here")
    args = p.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM's pool exists
    import anchors_models as am
    from quiet import quiesce

    from codl_tvm import runtime
    from codl_tvm.profiler.vm_calls import vm_calls

    folder = Path(args.artifacts) / args.model
    meta, lits, sources, inputs = am.seeded(folder)
    runner = runtime.load(folder / "cpu",
                          params=am.realize(meta["codl"]["cpu"]["params"], sources, lits))
    vm_args = runner._args(inputs)
    main_fn = runner.vm["main"]

    def run() -> Any:
        return main_fn(*vm_args)

    doc: dict[str, Any] = {"model": args.model, "threads": args.threads}
    with tempfile.TemporaryDirectory() as tmp:
        sess = am.ort_session(folder, meta, sources, args.threads, Path(tmp))
        quiesce()
        doc["codl_ms"] = median_ms(run)
        quiesce()  # TVM's workers spin after the last call: not on onnxruntime's time
        doc["onnxruntime_ms"] = median_ms(lambda: sess.run(None, inputs))
        doc["onnxruntime_nodes_us"] = ort_nodes(Path(tmp) / "model.onnx", inputs,
                                                args.threads, Path(tmp))
    doc["codl_calls"] = vm_calls(runner.vm, run, RUNS)
    print(f"{args.model}, {args.threads} threads: codl-tvm {doc['codl_ms']:.3f} ms, "
          f"onnxruntime {doc['onnxruntime_ms']:.3f} ms (medians, unprofiled)")
    calls = doc["codl_calls"]
    total = sum(c["us"] for c in calls.values())
    builtin = sum(c["us"] for n, c in calls.items() if n.startswith("vm.builtin"))
    print(f"\ncodl-tvm: {total:.0f} us of VM calls per run ({builtin:.0f} us in builtins), "
          f"{sum(c['calls'] for c in calls.values())} calls")
    for name, c in sorted(calls.items(), key=lambda kv: -kv[1]["us"])[:args.top]:
        print(f"  {c['us']:8.1f} us x{c['calls']:<3} {name[:60]} {c['shapes']}")
    nodes = doc["onnxruntime_nodes_us"]
    print(f"\nonnxruntime: {sum(nodes.values()):.0f} us of nodes per run")
    for name, us in sorted(nodes.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"  {us:8.1f} us {name[:80]}")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
