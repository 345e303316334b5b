"""Where one run of a codl-tvm artifact spends its time on a CUDA GPU: every kernel, copy and
CUDA API call of one ``main``, on one clock, through PyTorch's CUPTI profiler (the GPU machine
has no nsys; ``shared/gpu/cupti_trace.py`` is the general tool, this one prints one run).

    python benchmarks/trace_split.py [--vm-calls] ARTIFACT [ARTIFACT ...] > trace.txt

For each artifact: 20 warm runs, then 5 profiled ``main`` calls (inputs already on their
devices, outputs not downloaded); the last one is printed as a timeline (us from its start):
GPU rows (kernels, copies) and host rows (CUDA API calls), then the host's gaps over 5 us
between API calls, which is where the CPU kernels, the VM and the Python stream functions run.
With ``--vm-calls`` every call the Relax VM makes is a host row of its own (``vm``: the CPU
kernels among them), through the VM's instrument, which adds a few microseconds to each.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def vm_ranges(vm) -> None:
    """Open a profiler range around each call ``vm`` makes (its instrument)."""
    from torch.autograd.profiler import record_function

    open_ranges: dict[str, list] = {}

    def instrument(_func, name, before, _ret, *args):
        if before:
            rf = record_function(f"vm:{name}")
            rf.__enter__()
            open_ranges.setdefault(name, []).append(rf)
        else:
            open_ranges[name].pop().__exit__(None, None, None)
        return 0

    vm.set_instrument(instrument)


def trace(path: str, vm_calls: bool = False) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from codl_tvm import runtime

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    r = runtime.load(path)
    args = r._args(r.random_inputs(seed=1))
    main = r.vm["main"]
    for _ in range(20):
        main(*args)
    r.devices[0].sync()
    if vm_calls:
        vm_ranges(r.vm)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            with record_function("codl-main"):
                main(*args)
            r.devices[0].sync()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = [e for e in json.load(open(f.name))["traceEvents"] if e.get("ph") == "X"]
    runs = sorted((e for e in events if e.get("name") == "codl-main"
                   and e.get("cat") == "user_annotation"), key=lambda e: e["ts"])  # host side
    t0, t1 = runs[-1]["ts"], runs[-1]["ts"] + runs[-1]["dur"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    api = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    vm = [e for e in events if e.get("cat") == "user_annotation"
          and e.get("name", "").startswith("vm:")]
    last_gpu = max((e["ts"] + e["dur"] for e in gpu if t0 <= e["ts"] <= t1 + 5000), default=t1)
    print(f"== {path}: main {t1 - t0:.1f} us on the host, GPU busy until {last_gpu - t0:.1f} us")
    where = {id(e): w for w, es in (("gpu ", gpu), ("host", api), ("vm  ", vm)) for e in es}
    rows = [(e["ts"] - t0, e["dur"], where[id(e)], e["name"][:60])
            for e in gpu + api + vm if t0 <= e["ts"] <= max(t1, last_gpu)]
    for ts, dur, where, name in sorted(rows):
        print(f"{ts:9.1f} {dur:8.1f}  {where} {name}")
    host = sorted((e["ts"] - t0, e["ts"] - t0 + e["dur"]) for e in api if t0 <= e["ts"] <= t1)
    print("host gaps over 5 us between CUDA API calls (start, length):")
    end = 0.0
    for start, stop in host:
        if start - end > 5:
            print(f"  {end:9.1f} {start - end:8.1f}")
        end = max(end, stop)
    if t1 - t0 - end > 5:
        print(f"  {end:9.1f} {t1 - t0 - end:8.1f}  (to the end of main)")


if __name__ == "__main__":
    with_vm = "--vm-calls" in sys.argv[1:]
    for artifact in [a for a in sys.argv[1:] if a != "--vm-calls"]:
        trace(artifact, with_vm)
