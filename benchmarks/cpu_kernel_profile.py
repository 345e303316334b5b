"""Where a model's CPU-only time goes on this host, kernel by kernel (the Relax VM's instrument).

    python benchmarks/cpu_kernel_profile.py mobilenet-v2 [--runs 10] [--top 20] [--json F]

Compiles the zoo model CPU-only for the ``cpu-pair`` preset (this host's CPU and cores), runs
it a few times, then times every VM call over ``--runs`` runs. Prints each kernel algorithm's
share (from the kernels' ``codl.blocking``) and the slowest kernels with their conv shape and
GFLOP/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--json", help="also write per-kernel rows here")
    args = p.parse_args()
    import codl_tvm
    import codl_tvm.schedules.apply as apply
    from codl_tvm import runtime, zoo
    from codl_tvm.profiler.vm_calls import vm_calls
    from codl_tvm.schedules.analysis import analyze

    scheduled: dict[str, tuple] = {}  # kernel name -> (PrimFunc before scheduling, blocking)
    schedule = apply.schedule_func

    def record(func, target, t):
        out = schedule(func, target, t)
        scheduled[str(func.attrs["global_symbol"])] = (func, out[1])
        return out

    apply.schedule_func = record
    mod = zoo.load(args.model)
    exe = codl_tvm.compile(mod, codl_tvm.DevicePair.preset("cpu-pair"),
                           codl_tvm.Plan.single(mod, "cpu"))
    apply.schedule_func = schedule
    with tempfile.TemporaryDirectory() as tmp:
        exe.export(Path(tmp) / "a")
        runner = runtime.load(Path(tmp) / "a")
        inputs = runner.random_inputs(seed=0)
        for _ in range(3):
            runner.run(inputs)
        calls = vm_calls(runner.vm, lambda: runner.run(inputs), args.runs)
    rows, by_kind = [], defaultdict(float)
    for name, call in calls.items():
        ms = call["us"] / 1e3
        # a kernel reading its weight packed at load (PrepackWeights) is X_prepacked_dN
        func, blocking = scheduled.get(name.replace("_prepacked_d", "_d"), (None, None))
        kind = blocking.algorithm if blocking else name
        by_kind[kind] += ms
        c = analyze(func).conv if func is not None else None
        flop = (2 * c.n * c.oc * c.oh * c.ow * (c.ic // c.groups) * c.kh * c.kw
                * call["calls"]) if c else 0
        rows.append({"kernel": name, "algorithm": kind, "ms": ms, "calls": call["calls"],
                     "conv": [c.ic, c.oc, c.h, c.w, c.kh, c.stride[0], c.groups] if c else None,
                     "gflops": flop / ms / 1e6 if flop else None})
    total = sum(by_kind.values())
    print(f"{args.model}: {total:.2f} ms of VM calls per run")
    for kind, ms in sorted(by_kind.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {ms:8.3f} ms {100 * ms / total:5.1f}%  {kind}")
    print("slowest kernels (conv: IC, OC, H, W, K, stride, groups):")
    for r in sorted(rows, key=lambda r: -r["ms"])[:args.top]:
        gf = f"{r['gflops']:7.1f} GFLOP/s" if r["gflops"] else ""
        print(f"  {r['ms']:7.3f} ms x{r['calls']:<3} {r['algorithm']:18} {r['conv'] or ''} {gf}")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
