"""Where a CPU-bound split's time goes: the split op against its parts, call by call.

A split whose CPU side (its rows to the host, the CPU part, its rows back) is the long pole
took 0.93-1.52x its CPU part plus its copies at the pinned floor (``COEXEC.md``). This
builds such splits of YOLO-V2's convs, with their CPU part and GPU part as convs of their own
(``coexec_conv.part_modules``), and times them in one process on the GPU machine:

- each artifact's latency, interleaved rounds (``Runner.time``);
- every call the Relax VM makes in the split and in the CPU part alone (the VM's
  instrument): the CPU kernels inside the split against the same kernels alone, the host's
  waits for copies, the VM's own calls;
- the CPU part alone with its input in the caches from the call before (as the suite and the
  profiler time it), fresh from a DMA before each call (a copy from the GPU into pinned
  memory, as in the split), and that while the GPU part runs (:data:`CONDITIONS`).

Build here (full TVM), run there (runtime-only TVM)::

    python benchmarks/split_breakdown.py build --out .devcarry/breakdown
    python benchmarks/split_breakdown.py run .devcarry/breakdown --json out.json --sms 8
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from coexec_conv import (  # noqa: E402 - the sibling module, after the path
    H100_CPU,
    H100_GPU,
    SPLIT_OPTIONS,
    _warm,
    conv_module,
    part_modules,
    shape_name,
    yolo_shapes,
)

# CPU-bound splits of results/coexec-edge.json (the CPU side above the GPU part), the ones
# whose latency over their CPU part plus copies was largest, and one GPU-bound control. At
# H@0.7 the CPU's 31 rows of 104 pixels leave its 1x1 GEMM a pixel tail (packed kernel); at
# H@0.6923 its 32 rows fill whole tiles (the kernel runs in place: tiling.gemm_plan)
CASES = (("104x104x128-64-k1s1", "H@0.7"), ("104x104x128-64-k1s1", "H@0.6923"),
         ("104x104x128-64-k1s1", "OC@0.875"),
         ("52x52x256-128-k1s1", "H@0.7"), ("52x52x256-128-k1s1", "OC@0.6875"),
         ("26x26x512-256-k1s1", "OC@0.6875"), ("13x13x1024-125-k1s1", "H@0.9"),
         ("52x52x128-256-k3s1", "H@0.7"), ("416x416x3-32-k3s1", "OC@0.875"),
         ("104x104x64-128-k3s1", "H@0.8"))
# twins of the split and its CPU part built with other kernel variants (1x1 convs only): the
# CPU's 1x1 GEMM packed (its input copied into panels, its result unpacked) where its pixels
# would let it run in place
TWINS = {"packed": {"cpu_gemm_in_place": False}}
KERNEL_DEVICE = re.compile(r"_d(\d+)$")  # a kernel's name ends in its device's index


def build(args: argparse.Namespace) -> None:
    import codl_tvm
    from codl_tvm.tiling.variants import use_variants

    pair = (codl_tvm.DevicePair("x86-cuda", H100_CPU, H100_GPU) if args.pair == "h100"
            else codl_tvm.DevicePair.preset(args.pair))
    shapes = {shape_name(s): s for s in yolo_shapes()}
    out, runs = Path(args.out), []
    chosen = [c for c in CASES if not args.only or f"{c[0]}/{c[1]}" in args.only.split(",")]
    for name, split in chosen[: args.cases]:
        s = shapes[name]
        mod = codl_tvm.load_model(conv_module(s))
        dim, _, ratio = split.partition("@")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exe = codl_tvm.compile(mod, pair, codl_tvm.Plan.uniform(mod, dim, float(ratio)),
                                   **SPLIT_OPTIONS)
        case = f"{name}/{split.replace('@', '_')}"
        arts = {"split": exe, **{f"{role}-only": codl_tvm.compile(mod, pair, codl_tvm.Plan.single(
            mod, role)) for role in ("cpu", "gpu")}}
        parts = part_modules(s, dim, exe.manifest["staging"]) or {}
        for role, sub in parts.items():
            sub = codl_tvm.load_model(sub)
            arts[f"{role}-part"] = codl_tvm.compile(sub, pair, codl_tvm.Plan.single(sub, role))
        for twin, changes in TWINS.items() if s["kh"] == 1 else ():
            with use_variants(**changes), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                arts[f"split/{twin}"] = codl_tvm.compile(
                    mod, pair, codl_tvm.Plan.uniform(mod, dim, float(ratio)), **SPLIT_OPTIONS)
                if "cpu" in parts:
                    sub = codl_tvm.load_model(parts["cpu"])
                    arts[f"cpu-part/{twin}"] = codl_tvm.compile(sub, pair,
                                                                codl_tvm.Plan.single(sub, "cpu"))
        for what, art in arts.items():
            art.export(out / case / what.replace("/", "_"), weights=False)
        runs.append({"shape": name, "split": split, "path": case,
                     "artifacts": {a: a.replace("/", "_") for a in arts}})
        print(f"{case}: {', '.join(arts)}", flush=True)
    (out / "index.json").write_text(json.dumps({"pair": pair.to_json(), "runs": runs}, indent=1))


def call_kind(name: str) -> str:
    """``cpu-kernel``, ``gpu-kernel``, ``copy``, ``streams`` or ``vm`` (the VM's builtins).
    A kernel's name ends in its device's index: the runner's device 0 is the GPU role's."""
    m = KERNEL_DEVICE.search(name)
    if m and not name.startswith(("vm.", "codl.", "runtime.")):
        return "gpu-kernel" if m.group(1) == "0" else "cpu-kernel"
    if name.startswith("codl.streams."):
        return "streams"
    if "copy" in name.lower() or name == "vm.builtin.to_device":
        return "copy"
    return "vm"


def calls_by_kind(calls: dict) -> dict[str, float]:
    kinds: dict[str, float] = {}
    for name, us in calls.items():
        k = call_kind(name)
        kinds[k] = kinds.get(k, 0.0) + us
    return kinds


def instrumented(runner, inputs: dict, runs: int) -> dict:
    """Per call name, the median over ``runs`` runs of its microseconds in a run
    (:func:`~codl_tvm.profiler.vm_calls.vm_calls`), and the instrumented run's median host
    time."""
    from codl_tvm.profiler.vm_calls import vm_calls

    args = runner._args(inputs)
    main, dev = runner.vm["main"], runner.devices[0]
    main(*args)
    dev.sync()
    wall: list[float] = []

    def once() -> None:
        t = time.perf_counter()
        main(*args)
        dev.sync()
        wall.append(time.perf_counter() - t)

    calls = vm_calls(runner.vm, once, runs)
    return {"calls": {n: c["median_us"] for n, c in calls.items()},
            "wall_us": 1e6 * float(np.median(wall))}


# how the CPU part alone is called, each timed call in turn (the first: as the suite times it)
CONDITIONS = ("warm", "fresh-input", "fresh-input+gpu-busy")


def part_conditions(cpu_part, gpu_part, inputs: dict, gpu_inputs: dict, runs: int) -> dict:
    """The CPU part alone, its call's host time (median us) with its input in the caches from
    the call before (``warm``), written into pinned memory by a DMA from the GPU just before
    (``fresh-input``, as a split's CPU part gets it), and that while the GPU part's kernels
    run (``fresh-input+gpu-busy``: launched just before, waited for after)."""
    import tvm

    from codl_tvm.profiler.host_memory import host_tensor

    (spec,) = cpu_part.manifest["inputs"]
    gpu = cpu_part.devices[0]
    cuda = cpu_part.manifest["devices"][0][0] == "cuda"
    pinned = host_tensor(spec["shape"], spec["dtype"], tvm.runtime.cpu(0), cuda)
    source = tvm.runtime.tensor(inputs[spec["name"]], gpu)
    source.copyto(pinned)
    gpu.sync()
    args = [pinned, *cpu_part._args(inputs)[1:]]
    gpu_args = gpu_part._args(gpu_inputs)
    main, gpu_main = cpu_part.vm["main"], gpu_part.vm["main"]
    times: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    for _ in range(runs):
        for c in CONDITIONS:
            if c != "warm":
                source.copyto(pinned)
                gpu.sync()
            if c.endswith("gpu-busy"):
                gpu_main(*gpu_args)
            t = time.perf_counter()
            main(*args)
            times[c].append(time.perf_counter() - t)
            gpu.sync()
    return {c: 1e6 * float(np.median(ts)) for c, ts in times.items()}


def run(args: argparse.Namespace) -> None:
    from codl_tvm import runtime

    root = Path(args.dir)
    index = json.loads((root / "index.json").read_text())
    paths = [str(root / c["path"] / d) for c in index["runs"] for d in c["artifacts"].values()]
    t0 = time.time()
    # nvcc compiles each artifact's kernels at its first load: fill the cache in parallel
    # (spawn: a forked child cannot use CUDA once the parent has touched it)
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        sum(pool.map(_warm, [paths[i:: args.jobs] for i in range(args.jobs)]))
    print(f"warmed {len(paths)} artifacts in {time.time() - t0:.0f} s", flush=True)
    rows = []
    for case in index["runs"]:
        arts = {a: runtime.load(root / case["path"] / d) for a, d in case["artifacts"].items()}
        inputs = {a: r.random_inputs(seed=1) for a, r in arts.items()}
        times: dict[str, list[float]] = {a: [] for a in arts}
        for _ in range(args.rounds):
            for a, r in arts.items():
                times[a].append(r.time(inputs[a], repeat=args.repeat, number=args.number))
        row = {"shape": case["shape"], "split": case["split"],
               "latency_us": {a: 1e6 * float(np.median(t)) for a, t in times.items()},
               "vm_calls": {}}
        for a in [a for a in arts if a.startswith(("split", "cpu-part"))]:
            got = instrumented(arts[a], inputs[a], args.runs)
            got["by_kind_us"] = calls_by_kind(got["calls"])
            row["vm_calls"][a] = got
        row["cpu_part_us"] = {
            a: part_conditions(arts[a], arts["gpu-part"], inputs[a], inputs["gpu-part"],
                               args.runs)
            for a in arts if a.startswith("cpu-part") and "gpu-part" in arts}
        rows.append(row)
        print_row(row)
    doc = {"sms": int(args.sms) if args.sms.isdigit() else args.sms, "rows": rows,
           "command": " ".join(sys.argv)}
    Path(args.json).write_text(json.dumps(doc, indent=1))


def print_row(row: dict) -> None:
    lat = row["latency_us"]
    print(f"== {row['shape']} {row['split']}: " + ", ".join(
        f"{a} {us:.1f} us" for a, us in lat.items()))
    split, part = row["vm_calls"].get("split", {}), row["vm_calls"].get("cpu-part", {})
    if not split:
        return
    kinds = sorted(set(split["by_kind_us"]) | set(part.get("by_kind_us", {})))
    print(f"   instrumented host time: split {split['wall_us']:.1f} us, "
          f"cpu part alone {part.get('wall_us', float('nan')):.1f} us")
    for k in kinds:
        print(f"   {k:11s} split {split['by_kind_us'].get(k, 0.0):8.1f} us   "
              f"cpu part alone {part.get('by_kind_us', {}).get(k, 0.0):8.1f} us")
    for name, us in sorted(split["calls"].items(), key=lambda kv: -kv[1])[:8]:
        print(f"     {us:8.1f} us  {name[:70]}")
    for a, got in row["vm_calls"].items():
        if "/" in a:
            print(f"   {a}: cpu-kernel {got['by_kind_us'].get('cpu-kernel', 0.0):.1f} us")
    for a, conditions in row["cpu_part_us"].items():
        print(f"   {a} alone, host time: " + ", ".join(
            f"{c} {us:.1f} us" for c, us in conditions.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", required=True)
    b.add_argument("--pair", default="h100", help="h100 (default) or a preset name")
    b.add_argument("--cases", type=int, help="only the first N cases")
    b.add_argument("--only", help="only these cases, SHAPE/SPLIT separated by commas "
                   "(e.g. 52x52x256-128-k1s1/H@0.7)")
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--json", required=True)
    r.add_argument("--rounds", type=int, default=5)
    r.add_argument("--repeat", type=int, default=5)
    r.add_argument("--number", type=int, default=10)
    r.add_argument("--runs", type=int, default=50, help="instrumented runs per artifact")
    r.add_argument("--sms", default="all", help="SMs the GPU was held to (recorded)")
    r.add_argument("--jobs", type=int, default=12, help="processes that warm the nvcc cache")
    args = parser.parse_args()
    {"build": build, "run": run}[args.cmd](args)


if __name__ == "__main__":
    main()
