"""The device half of ``noise_probe.py``: system counters and the timed visits.

Standard library, numpy and the TVM *runtime* only (it runs where just runtime-only TVM is
installed); ``noise_probe.py run`` calls :func:`run`.
"""

from __future__ import annotations

import json
import os
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

MODES: dict[str, tuple[bool, float, int]] = {  # name: (fresh inputs, repeat ms, repeats)
    "fresh10": (True, 10.0, 5),
    "reuse10": (False, 10.0, 5),
    "fresh1": (True, 1.0, 40),
    "reuse1": (False, 1.0, 40),
}


# ---------------------------------------------------------------- system counters (Linux)
def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cgroup_cpu_stat() -> dict[str, int]:
    for path in ("/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/cpu/cpu.stat",
                 "/sys/fs/cgroup/cpu,cpuacct/cpu.stat"):  # fmt: skip
        text = _read(path)
        if text:
            return {k: int(v) for k, v in (ln.split() for ln in text.splitlines() if ln.strip())}
    return {}


def counters() -> dict[str, float]:
    """Cumulative counters; a visit records their differences."""
    cpu = _read("/proc/stat").splitlines()[0].split()[1:]
    jiffies = [int(x) for x in cpu]
    own = _read("/proc/self/stat").rsplit(")", 1)[-1].split()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cg = _cgroup_cpu_stat()
    busy = sum(jiffies[:3]) + sum(jiffies[4:7])  # user nice system irq softirq (not idle/iowait)
    return {
        "steal_j": float(jiffies[7]) if len(jiffies) > 7 else 0.0,
        "busy_j": float(busy),
        "own_j": float(int(own[11]) + int(own[12])),  # utime + stime of every thread
        "nivcsw": float(ru.ru_nivcsw),
        "throttled": float(cg.get("nr_throttled", 0)),
        "throttled_us": float(cg.get("throttled_usec", cg.get("throttled_time", 0) / 1e3)),
        "t_s": time.perf_counter(),
    }


def _where() -> int:
    """The vCPU the calling thread is on now (field 39 of /proc/thread-self/stat)."""
    return int(_read("/proc/thread-self/stat").rsplit(")", 1)[-1].split()[36])


def threads() -> list[dict[str, Any]]:
    """Every thread of this process: its vCPU now and the vCPUs it may run on."""
    out = []
    for task in sorted(Path("/proc/self/task").iterdir(), key=lambda p: int(p.name)):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[-1].split()
            out.append(
                {
                    "tid": int(task.name),
                    "cpu": int(fields[36]),
                    "affinity": sorted(os.sched_getaffinity(int(task.name))),
                }
            )
        except OSError:
            continue
    return out


def machine() -> dict[str, Any]:
    return {
        "nproc": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "cpu.max": _read("/sys/fs/cgroup/cpu.max").strip(),
        "cfs_quota_us": _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").strip(),
        "cpu.stat": _cgroup_cpu_stat(),
        "thp": _read("/sys/kernel/mm/transparent_hugepage/enabled").strip(),
        "thp_defrag": _read("/sys/kernel/mm/transparent_hugepage/defrag").strip(),
        "loadavg": _read("/proc/loadavg").strip(),
        "governor": _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").strip(),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("TVM_", "OMP_"))},
    }


def idle_rates(seconds: float = 5.0) -> dict[str, float]:
    """Steal and other processes' CPU while this process sleeps (fraction of all vCPUs)."""
    a = counters()
    time.sleep(seconds)
    b = counters()
    total = seconds * os.sysconf("SC_CLK_TCK") * (os.cpu_count() or 1)
    return {
        "steal": (b["steal_j"] - a["steal_j"]) / total,
        "others_busy": (b["busy_j"] - a["busy_j"] - (b["own_j"] - a["own_j"])) / total,
    }


# ---------------------------------------------------------------- run (runtime-only TVM)
def _timing(vm: Any, name: str, args: list[Any], dev: Any, repeat_ms: float, repeats: int):
    vm.set_input(name, *args)
    vm.invoke_stateful(name)
    dev.sync()
    t0, calls = time.perf_counter(), 0
    while calls < 20 and time.perf_counter() - t0 < 5e-3:
        vm.invoke_stateful(name)
        dev.sync()
        calls += 1
    call_s = (time.perf_counter() - t0) / max(calls, 1)
    number = max(1, int(np.ceil(repeat_ms / 1e3 / max(call_s, 1e-7))))
    repeat = max(1, min(repeats, int(0.12 / max(number * call_s, 1e-9))))
    res = vm.time_evaluator("invoke_stateful", dev, number=number, repeat=repeat)(name)
    return [float(c) * 1e6 for c in res.results], number


def run(
    bundle: Path,
    select: Path,
    out: Path,
    visits: int,
    seed: int,
    modes: list[str] | None = None,
    pin_master: int | None = None,
) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "codl_tvm" / "profiler"))
    import bundle_runner  # noqa: PLC0415  (sibling import: runtime-only TVM)
    import tvm  # noqa: PLC0415
    from tvm.runtime.vm import VirtualMachine  # noqa: PLC0415

    man = json.loads((bundle / "manifest.json").read_text())
    chosen = json.loads(select.read_text())
    files = {c["file"] for c in chosen}
    if any(k == "cuda" for x in man["libs"] if x["file"] in files for k, _ in x["devices"]):
        bundle_runner.setup_cuda(man["cuda_arch"])
    libs: dict[str, Any] = {}
    items = []
    for sel in chosen:
        lib = next(x for x in man["libs"] if x["file"] == sel["file"])
        if sel["file"] not in libs:
            devs = [tvm.device(k, i) for k, i in lib["devices"]]
            vm = VirtualMachine(tvm.runtime.load_module(str(bundle / lib["file"])), devs)
            libs[sel["file"]] = (vm, devs)
        entry = next(e for e in lib["entries"] if e["name"] == sel["name"])
        items.append((sel, entry))
    modes = modes or list(MODES)
    sel0, entry0 = items[0]
    vm0, devs0 = libs[sel0["file"]]
    _timing(
        vm0,
        entry0["name"],
        bundle_runner.make_inputs(  # starts TVM's thread pool
            entry0["inputs"], [devs0[j] for j in entry0["input_devices"]]
        ),
        devs0[entry0["timer_device"]],
        1.0,
        1,
    )
    if pin_master is not None:  # this thread only: the pool's workers keep their own cores
        os.sched_setaffinity(0, {pin_master})
    with out.open("w") as fh:
        fh.write(
            json.dumps(
                {
                    "machine": machine(),
                    "idle": idle_rates(),
                    "threads": threads(),
                    "modes": modes,
                    "pin_master": pin_master,
                }
            )
            + "\n"
        )
        reused: dict[int, list[Any]] = {}
        rng = random.Random(seed)
        for rnd in range(visits):
            order = [(i, m) for i in range(len(items)) for m in modes]
            rng.shuffle(order)
            for i, mode in order:
                sel, entry = items[i]
                vm, devs = libs[sel["file"]]
                fresh, repeat_ms, repeats = MODES[mode]
                in_devs = [devs[j] for j in entry["input_devices"]]
                if fresh or i not in reused:
                    args = bundle_runner.make_inputs(entry["inputs"], in_devs)
                    if not fresh:
                        reused[i] = args
                args = args if fresh else reused[i]
                dev = devs[entry["timer_device"]]
                a, cpu0 = counters(), _where()
                costs, number = _timing(vm, entry["name"], args, dev, repeat_ms, repeats)
                b, cpu1 = counters(), _where()
                fh.write(
                    json.dumps(
                        {
                            "i": i,
                            "key": sel["key"],
                            "mode": mode,
                            "round": rnd,
                            "number": number,
                            "costs_us": costs,
                            "cpu": [cpu0, cpu1],
                            **{k: b[k] - a[k] for k in a},
                            "t0_s": a["t_s"],
                        }
                    )
                    + "\n"
                )
            fh.flush()
            print(f"round {rnd + 1}/{visits} done", flush=True)
