"""Kernel benchmark: TVM's default path vs codl_tvm.schedules, GFLOP/s and % of FMA peak.

Two steps, so the GPU machine needs only the TVM runtime::

    python benchmarks/kernels.py build --pair x86-cuda --out .devcarry/kernels-x86-cuda
    python benchmarks/kernels.py run .devcarry/kernels-x86-cuda --json out.json

``build`` compiles every workload shape (../shared/workloads) for each processor of the
pair twice (default: LegalizeOps + plain loops on the CPU / DLight Fallback on the GPU;
ours: ApplySchedules) and exports them as one library per (processor, path), plus the FMA
peak microkernel and a manifest. The default CPU path is single-threaded naive loops, so it
is built only for shapes up to ``--default-cpu-gflop`` (the table says which were run).

``build --gpu-conv-variants dlight,tiled-64`` also builds the GPU convs with each named tile
table of ``codl_tvm/schedules/gpu_conv.py`` (``dlight`` = the DLight implicit GEMM) as
libraries ``gpu_var-<name>``; ``run`` then times them too, checks their outputs against
the default GPU kernel and prints one median line per variant.

``build --gpu-winograd`` adds the library ``gpu_var-winograd``: the 3x3 stride-1 convs only,
all scheduled with the GPU Winograd kernel (``codl_tvm/schedules/gpu_winograd.py``); ``run``
reports it over those shapes, with its median speed-up over ``gpu_ours`` on the same shapes.

``table RESULT.json`` prints the markdown tables of ``benchmarks/KERNELS.md`` from a ``run``
result: per processor and op, and per kernel (the algorithm each shape ran)::

    python benchmarks/kernels.py table benchmarks/results/kernels-h100.json
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


def _winograd_kernel(name: str, func, target):
    """``func`` scheduled by the GPU Winograd rule, or ``None`` where it does not apply."""
    from codl_tvm.schedules import blocking_of, gpu_winograd
    from codl_tvm.schedules import testing as T
    from codl_tvm.schedules.analysis import analyze

    if not gpu_winograd.applies(analyze(func).conv):
        return None
    with gpu_winograd.enable():
        var = T.schedule(func, target)
    if blocking_of(var).rule != "gpu-conv2d-winograd":
        print(f"warning: GPU Winograd declined {name}; left out of gpu_var-winograd")
        return None
    return var


def build(pair: str, out: Path, default_cpu_gflop: float, only: str | None,
          variants: list[str], winograd: bool = False) -> None:
    import tvm
    from kernel_shapes import make_func
    from tqdm import tqdm
    from tvm.s_tir import dlight as dl

    from benchmarks.peak.peak_cpu import peak_args_shapes, peak_flops, peak_func
    from codl_tvm.schedules import blocking_of, gpu_conv
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
    variants = variants if "gpu" in targets else []
    libs.update({f"gpu_var-{v}": {} for v in variants})
    winograd = winograd and "gpu" in targets
    if winograd:
        libs["gpu_var-winograd"] = {}
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
                for v in variants if spec.op == "conv2d" else []:
                    with gpu_conv.use_variant(v):
                        var = T.schedule(func, target)
                    libs[f"gpu_var-{v}"][spec.name] = var
                    entry["blocking"][f"gpu_var-{v}"] = json.loads(blocking_of(var).to_json())
                    entry["runs"][f"gpu_var-{v}"] = True
                wino = _winograd_kernel(spec.name, func, target) if winograd else None
                if wino is not None:
                    libs["gpu_var-winograd"][spec.name] = wino
                    entry["blocking"]["gpu_var-winograd"] = json.loads(
                        blocking_of(wino).to_json())
                    entry["runs"]["gpu_var-winograd"] = True
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
    # a variant library may hold only some kernels (winograd: 3x3 s1); entry["runs"] says which
    manifest["gpu_conv_variants"] = variants + (["winograd"] if winograd else [])
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"wrote {len(specs)} kernels x {len(manifest['libs'])} libraries to {out}")


def _check_variants(d: Path, manifest: dict) -> dict[str, float]:
    """Max relative error of each variant's GPU conv outputs against the default GPU kernel."""
    import numpy as np
    import tvm

    variants = [f"gpu_var-{v}" for v in manifest["gpu_conv_variants"]]
    names = ["gpu_default", "gpu_ours", *variants]
    libs = {n: tvm.runtime.load_module(str(d / manifest["libs"][n])) for n in names}
    dev, rng, worst = tvm.cuda(0), np.random.default_rng(1), {n: 0.0 for n in names[1:]}
    for k in manifest["kernels"]:
        if k["op"] != "conv2d":
            continue
        args = [tvm.runtime.tensor(rng.uniform(-1, 1, s).astype("float32"), dev)
                for s in k["args"]]
        outs = {}
        for n in names:
            if k["runs"].get(n):  # a variant library may lack this kernel
                libs[n][k["name"]](*args)
                outs[n] = args[-1].numpy().copy()
        ref = outs["gpu_default"]
        for n in names[1:]:
            if n not in outs:
                continue
            err = float(np.abs(outs[n] - ref).max() / max(np.abs(ref).max(), 1e-30))
            worst[n] = max(worst[n], err)
            if err > 1e-4:
                print(f"MISMATCH {k['name']} {n}: rel. error {err:.2e}")
    return worst


def variant_report(d: Path, json_out: Path) -> None:
    """Median % of GPU peak per conv variant (one H100 run compares the tile tables)."""
    import statistics

    manifest = json.loads((d / "manifest.json").read_text())
    variants = manifest.get("gpu_conv_variants") or []
    if not variants:
        return
    worst = _check_variants(d, manifest)
    data = json.loads(json_out.read_text())
    convs = [r for r in data["kernels"] if r["op"] == "conv2d"]
    report = {}
    for lib in ["gpu_default", "gpu_ours", *(f"gpu_var-{v}" for v in variants)]:
        pct = [r[f"{lib}_pct_peak"] for r in convs if f"{lib}_pct_peak" in r]
        if pct:
            report[lib] = {"median_pct_peak": statistics.median(pct), "min": min(pct),
                           "max": max(pct), "max_rel_err": worst.get(lib), "shapes": len(pct)}
            # variants holding a subset of the shapes: compare on those shapes only
            both = [r for r in convs if f"{lib}_us" in r and "gpu_ours_us" in r]
            if lib != "gpu_ours" and both:
                report[lib]["median_speedup_vs_gpu_ours"] = statistics.median(
                    r["gpu_ours_us"] / r[f"{lib}_us"] for r in both)
    best = {r["name"]: max((lib for lib in report if f"{lib}_pct_peak" in r),
                           key=lambda lib, r=r: r[f"{lib}_pct_peak"]) for r in convs}
    data["gpu_conv_variants"] = {"summary": report, "best_per_kernel": best}
    json_out.write_text(json.dumps(data, indent=1))
    print("\nGPU conv2d variants (% of measured FP32 peak over shapes):")
    for lib, e in report.items():
        err = "-" if e["max_rel_err"] is None else f"{e['max_rel_err']:.1e}"
        vs = e.get("median_speedup_vs_gpu_ours")
        vs = "" if vs is None else f"  {vs:.2f}x gpu_ours"
        print(f"  {lib:<24} median {e['median_pct_peak']:5.1f}%  min {e['min']:5.1f}%  "
              f"max {e['max']:5.1f}%  max rel. err {err}  ({e['shapes']} shapes){vs}")


def _median(values: list[float]) -> float:
    import statistics

    return statistics.median(values)


def table(json_path: Path) -> str:
    """Markdown tables of a ``run`` result: per (processor, op) and per (processor, kernel)."""
    data = json.loads(json_path.read_text())
    peaks = data["peak_gflops"]
    lines = ["Measured FP32 FMA peak: " + ", ".join(
        f"{p.upper()} {v:.0f} GFLOP/s" for p, v in peaks.items() if v), ""]

    def rows(group) -> list[str]:
        out = []
        for key, sel in group.items():
            proc = key[0]
            both = [r for r in sel if f"{proc}_default_us" in r]
            ups = [r[f"{proc}_default_us"] / r[f"{proc}_ours_us"] for r in both]
            speed = f"{_median(ups):.1f}x" if ups else "-"
            pct = [r[f"{proc}_ours_pct_peak"] for r in sel if f"{proc}_ours_pct_peak" in r]
            gf = _median([r[f"{proc}_ours_gflops"] for r in sel])
            out.append(f"| {' | '.join(key)} | {len(sel)} | {len(both)} | {speed} | "
                       + (f"{_median(pct):.1f}% | " if pct else "- | ") + f"{gf:.0f} |")
        return out

    head = ("| shapes | with default | median speed-up vs default | median % of peak "
            "| median GFLOP/s |")
    rule = "|---:|---:|---:|---:|---:|"
    by_op: dict = {}
    by_algo: dict = {}
    for r in data["kernels"]:
        for proc in ("cpu", "gpu"):
            if f"{proc}_ours_us" not in r:
                continue
            by_op.setdefault((proc, r["op"]), []).append(r)
            algo = (r.get("blocking") or {}).get(proc, {}).get("algorithm", "?")
            by_algo.setdefault((proc, r["op"], algo), []).append(r)
    lines += ["| processor | op " + head, "|---|---" + rule, *rows(by_op), ""]
    lines += ["| processor | op | kernel " + head, "|---|---|---" + rule,
              *rows(dict(sorted(by_algo.items()))), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile and export every kernel (needs full TVM)")
    b.add_argument("--pair", choices=sorted(PAIRS), required=True)
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--default-cpu-gflop", type=float, default=0.25,
                   help="build the naive default CPU conv only up to this many GFLOP")
    b.add_argument("--only", choices=["conv2d", "pool2d", "dense"])
    b.add_argument("--gpu-conv-variants", default="",
                   help="comma-separated gpu_conv tile tables (or dlight) to build side by side")
    b.add_argument("--gpu-winograd", action="store_true",
                   help="also build library gpu_var-winograd: the 3x3 s1 convs by GPU Winograd")
    r = sub.add_parser("run", help="time exported kernels with the TVM runtime only")
    r.add_argument("dir", type=Path)
    r.add_argument("--json", type=Path, required=True)
    r.add_argument("--min-repeat-ms", type=float, default=40.0)
    r.add_argument("--gpu-peak-json", type=Path, help="output of peak/peak_gpu.cu, if run")
    t = sub.add_parser("table", help="markdown tables of a run's JSON result")
    t.add_argument("json", type=Path)
    args = parser.parse_args()
    if args.cmd == "table":
        print(table(args.json))
    elif args.cmd == "build":
        variants = [v for v in args.gpu_conv_variants.split(",") if v]
        build(args.pair, args.out, args.default_cpu_gflop, args.only, variants,
              args.gpu_winograd)
    else:
        from kernel_run import run

        run(args.dir, args.json, args.min_repeat_ms, args.gpu_peak_json)
        variant_report(args.dir, args.json)
