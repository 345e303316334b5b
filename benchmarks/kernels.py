"""Kernel benchmark: TVM's default path vs codl_tvm.schedules, GFLOP/s and % of FMA peak.

Two steps, so the GPU machine needs only the TVM runtime::

    python benchmarks/kernels.py build --pair x86-cuda --out .devcarry/kernels-x86-cuda
    python benchmarks/kernels.py run .devcarry/kernels-x86-cuda --json out.json

``build`` compiles every workload shape (../shared/workloads) for each processor of the
pair twice (default: LegalizeOps + plain loops on the CPU / DLight Fallback on the GPU;
ours: ApplySchedules) and exports them as one library per (processor, path), plus the FMA
peak microkernel and a manifest. The default CPU path is single-threaded naive loops, so it
is built only for shapes up to ``--default-cpu-gflop`` (the table says which were run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernel_shapes import load_specs  # noqa: E402

PAIRS = {
    "cpu-pair": {"cpu": None, "gpu": None},
    "x86-cuda": {
        "cpu": {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16},
        "gpu": {"kind": "cuda", "arch": "sm_90"},
    },
}


def _dev_cpu_target() -> dict:
    import tvm

    mcpu = tvm.target.codegen.llvm_get_system_cpu()
    return {"kind": "llvm", "mcpu": mcpu, "num-cores": os.cpu_count() or 1}


def _build_lib(funcs: dict, target, path: Path) -> None:
    import tvm

    mod = tvm.IRModule({
        name: f.with_attr("global_symbol", name).without_attr("target")
        for name, f in funcs.items()
    })
    tvm.compile(mod, target=target).export_library(str(path))


def build(pair: str, out: Path, default_cpu_gflop: float, only: str | None) -> None:
    import tvm
    from kernel_shapes import make_func
    from tqdm import tqdm
    from tvm.s_tir import dlight as dl

    from benchmarks.peak.peak_cpu import peak_args_shapes, peak_flops, peak_func
    from codl_tvm.schedules import blocking_of
    from codl_tvm.schedules import testing as T

    cfg = dict(PAIRS[pair])
    cfg["cpu"] = cfg["cpu"] or _dev_cpu_target()
    cpu = tvm.target.Target(cfg["cpu"])
    targets = {"cpu": cpu}
    if cfg["gpu"]:
        targets["gpu"] = tvm.target.Target(cfg["gpu"], host=cfg["cpu"])
    specs = [s for s in load_specs() if only is None or s.op == only]
    out.mkdir(parents=True, exist_ok=True)
    libs: dict[str, dict] = {f"{p}_{v}": {} for p in targets for v in ("default", "ours")}
    manifest = {"pair": pair, "targets": cfg, "kernels": [], "libs": {}}
    for spec in tqdm(specs, desc="schedule"):
        func = make_func(spec)
        entry = {"name": spec.name, "op": spec.op, "params": spec.params, "flops": spec.flops,
                 "models": spec.models, "args": [[int(d) for d in p.shape] for p in func.params],
                 "runs": {}, "blocking": {}}
        for proc, target in targets.items():
            ours = T.schedule(func, target)
            libs[f"{proc}_ours"][spec.name] = ours
            entry["blocking"][proc] = json.loads(blocking_of(ours).to_json())
            entry["runs"][f"{proc}_ours"] = True
            if proc == "gpu":
                default = dl.ApplyDefaultSchedule(dl.gpu.Fallback())(
                    tvm.IRModule({"main": T.with_target(func, target)}))["main"]
                libs["gpu_default"][spec.name] = default
                entry["runs"]["gpu_default"] = True
            elif spec.flops <= default_cpu_gflop * 1e9 or spec.op != "conv2d":
                libs["cpu_default"][spec.name] = func
                entry["runs"]["cpu_default"] = True
        manifest["kernels"].append(entry)
    for name, funcs in tqdm(libs.items(), desc="compile"):
        if funcs:
            proc = name.split("_")[0]
            _build_lib(funcs, targets[proc], out / f"{name}.so")
            manifest["libs"][name] = f"{name}.so"
    _build_lib({"fma_peak": peak_func(cpu)}, cpu, out / "peak_cpu.so")
    manifest["peak_cpu"] = {"flops": peak_flops(cpu), "args": peak_args_shapes(cpu)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"wrote {len(specs)} kernels x {len(manifest['libs'])} libraries to {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile and export every kernel (needs full TVM)")
    b.add_argument("--pair", choices=sorted(PAIRS), required=True)
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--default-cpu-gflop", type=float, default=0.25,
                   help="build the naive default CPU conv only up to this many GFLOP")
    b.add_argument("--only", choices=["conv2d", "pool2d", "dense"])
    r = sub.add_parser("run", help="time exported kernels with the TVM runtime only")
    r.add_argument("dir", type=Path)
    r.add_argument("--json", type=Path, required=True)
    r.add_argument("--min-repeat-ms", type=float, default=40.0)
    r.add_argument("--gpu-peak-json", type=Path, help="output of peak/peak_gpu.cu, if run")
    args = parser.parse_args()
    if args.cmd == "build":
        build(args.pair, args.out, args.default_cpu_gflop, args.only)
    else:
        from kernel_run import run

        run(args.dir, args.json, args.min_repeat_ms, args.gpu_peak_json)
