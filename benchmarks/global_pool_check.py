"""Global pools on the GPU: the kernel codl-tvm builds against the one before, right and timed.

Session 19 gave global max pools a cross-thread reduction (``gpu_rules.cross_thread_reduce``):
DLight's ``Reduction`` takes sums only, so they had fallen to ``Fallback``, one thread per
channel looping over the whole window. The CPU tests only compile CUDA; this runs it::

    # here (full TVM): one library per kernel kind, inputs and numpy's answers
    python benchmarks/global_pool_check.py build -o .devcarry/gpool
    # there (runtime-only TVM, CUDA; carry .devcarry/tvm-runtime.tgz and .devcarry/gpool):
    python benchmarks/global_pool_check.py run .devcarry/gpool --json $OUT/gpool-h100.json

``run`` prints each pool's relative error against numpy and both kernels' times, writes them
as JSON, and exits 1 when an error is over 1e-5.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GPU = {"kind": "cuda", "arch": "sm_90"}
TOL = 1e-5
# (kind, channels, size): the pool stratum's global pools (benchmarks/results/pools-h100),
# ResNet-18/50's, and an input whose window needs several passes of 256 threads
SHAPES = [("max", 30, 13), ("max", 248, 13), ("max", 1539, 18), ("max", 264, 24),
          ("max", 512, 7), ("max", 2048, 7), ("max", 64, 56), ("avg", 512, 7),
          ("avg", 2048, 7), ("avg", 264, 24)]
KERNELS = ("codl", "fallback")  # codl-tvm's dispatch now; DLight's Fallback (max, before)


def _name(kind: str, c: int, hw: int) -> str:
    return f"{kind}_{c}x{hw}x{hw}"


def build(out: Path) -> None:
    import tvm

    from codl_tvm.schedules import blocking_of, gpu_rules
    from codl_tvm.schedules import testing as T

    target = tvm.target.Target(GPU, host={"kind": "llvm"})
    out.mkdir(parents=True, exist_ok=True)
    funcs: dict[str, dict] = {k: {} for k in KERNELS}
    rng = np.random.default_rng(19)
    arrays, manifest = {}, {"pools": []}
    for kind, c, hw in SHAPES:
        name = _name(kind, c, hw)
        func = T.pool2d_func((1, c, hw, hw), kind, pool_size=(hw, hw))
        funcs["codl"][name] = T.schedule(func, target)
        if kind == "max":
            funcs["fallback"][name] = gpu_rules.apply_dlight(func, target, ("fallback",))[0]
        x = rng.standard_normal((1, c, hw, hw)).astype("float32")
        ref = x.max(axis=(2, 3), keepdims=True) if kind == "max" else x.mean(
            axis=(2, 3), keepdims=True)
        arrays[f"{name}_x"], arrays[f"{name}_ref"] = x, ref
        manifest["pools"].append({"name": name, "kernels": sorted(
            k for k in KERNELS if name in funcs[k]),
            "algorithm": blocking_of(funcs["codl"][name]).algorithm})
    for k, fs in funcs.items():
        mod = tvm.IRModule({n: f.with_attr("global_symbol", n).without_attr("target")
                            for n, f in fs.items()})
        tvm.compile(mod, target=target).export_library(str(out / f"{k}.so"))
    np.savez(out / "data.npz", **arrays)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"{len(SHAPES)} pools, {len(KERNELS)} libraries -> {out}")


def run(d: Path, json_out: Path | None) -> int:
    import tvm

    from codl_tvm.runtime import enable_cuda

    if not enable_cuda():
        raise SystemExit("no CUDA device")
    dev = tvm.cuda(0)
    manifest = json.loads((d / "manifest.json").read_text())
    data = np.load(d / "data.npz")
    libs = {k: tvm.runtime.load_module(str(d / f"{k}.so")) for k in KERNELS}
    rows, bad = [], 0
    print("| pool | kernel now | rel. error | now, us | Fallback, us | Fallback / now |")
    print("|---|---|---:|---:|---:|---:|")
    for p in manifest["pools"]:
        name, x, ref = p["name"], data[f"{p['name']}_x"], data[f"{p['name']}_ref"]
        row = {"pool": name, "algorithm": p["algorithm"]}
        for k in p["kernels"]:
            args = [tvm.runtime.tensor(x, dev), tvm.runtime.tensor(np.zeros_like(ref), dev)]
            libs[k][name](*args)
            err = float(np.abs(args[1].numpy() - ref).max() / np.abs(ref).max())
            ev = libs[k].time_evaluator(name, dev, number=1, repeat=7, min_repeat_ms=20)
            row[f"{k}_rel_err"], row[f"{k}_us"] = err, float(np.median(ev(*args).results)) * 1e6
            bad += err > TOL
        old = row.get("fallback_us")
        print(f"| {name} | {p['algorithm']} | {row['codl_rel_err']:.1e} | {row['codl_us']:.1f} | "
              + (f"{old:.1f} | {old / row['codl_us']:.1f}x |" if old else "- | - |"))
        rows.append(row)
    if json_out:
        json_out.write_text(json.dumps(rows, indent=1))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("-o", "--output", type=Path, required=True)
    r = sub.add_parser("run")
    r.add_argument("dir", type=Path)
    r.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "build":
        build(args.output)
        return 0
    return run(args.dir, args.json)


if __name__ == "__main__":
    sys.exit(main())
