"""The OpenCL path run for real: the zoo CNNs, unsplit and split, on OpenCL devices.

For each CNN, artifacts for an x86 CPU beside any OpenCL device (the ``x86-opencl`` preset's
roles, with a CPU target both machines run): CPU-only (the reference), GPU-only, uniform H and
OC splits and a codl plan with NCHW buffers, and GPU-only and H / OC splits on Adreno's
texture path (``image2d_array_t``, ``NCHW4c``: the ``android-adreno`` GPU target beside the
same CPU). Nothing carried holds weights: each model's tensors are drawn from a seed on the
machine that runs it, and each artifact's parameters are found at build time as views of them
(``anchors_weights``), so every artifact of a model runs the same weights.

    # here (full TVM): artifacts, ~1 MiB without weights
    python benchmarks/opencl_verify.py build -o .devcarry/opencl
    # where an OpenCL device is (runtime-only TVM + tools/opencl-runtime/build.sh's plugin):
    python benchmarks/opencl_verify.py run .devcarry/opencl --device pocl -o $OUT/pocl.json
    # the GPU machine, NVIDIA OpenCL and PoCL: bash benchmarks/run_opencl.sh
    python benchmarks/opencl_verify.py report OUT/*.json -o benchmarks/results/opencl-verify.json

``rel_err`` of a row: GPU-only against CPU-only; every other plan against GPU-only (NCHW) on
the same device, which is the unsplit model there. ``run`` exits 1 when a split is over 1e-5
or GPU-only over 1e-4 (other kernels, other summation orders).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from anchors_models import seeded_zoo_model  # noqa: E402
from anchors_weights import ValueIndex, draw, realize, recipes  # noqa: E402

MODELS = ("yolo-v2", "vgg-16", "resnet-18", "mobilenet-v2", "inception-v3", "posenet",
          "fast-style-transfer")
CPU = {"kind": "llvm", "mcpu": "x86-64-v4", "num-cores": 16}  # AVX-512: Zen 4/5, Sapphire Rapids
SPLIT_TOL = 1e-5  # a split must give the unsplit answer
UNSPLIT_TOL = 1e-4  # GPU-only against CPU-only: other kernels, other summation orders
SEED = 0
LITERAL_MAX = 8 << 20  # bytes: texture weights whose channels are zero-padded are no views
ROW_MARK = "ROW "  # a result row on a child's stdout
EDGE_SMS = 8  # the codl plan is made for a GPU of this many SMs beside the CPU (so it splits)
# plan name -> (texture path, dim, ratio); "codl" is planned
PLANS: dict[str, tuple[bool, str | None, float | None]] = {
    "cpu-only": (False, None, None), "gpu-only": (False, None, None), "H": (False, "H", 0.5),
    "OC": (False, "OC", 0.5), "codl": (False, None, None),
    "texture gpu-only": (True, None, None), "texture H": (True, "H", 0.5),
    "texture OC": (True, "OC", 0.5),
}


def _pairs() -> dict[bool, Any]:
    import codl_tvm

    adreno = codl_tvm.DevicePair.preset("android-adreno").gpu_spec
    return {False: codl_tvm.DevicePair("x86-opencl", CPU, {"kind": "opencl"}),
            True: codl_tvm.DevicePair("x86-opencl-texture", CPU, adreno)}


def _codl_plan(mod: Any) -> Any:
    """The codl strategy on the shipped predictor, its GPU held to :data:`EDGE_SMS` SMs."""
    from codl_tvm.planner import make_plan
    from codl_tvm.planner.api import PredictorCosts, default_predictor
    from codl_tvm.predictor import load

    predictor = load(default_predictor("x86-cuda"))
    predictor._use_machine({"gpu_sms": EDGE_SMS})  # as calibrate(machine=...) does
    return make_plan(mod, "codl", PredictorCosts(predictor)).plan


def _plan(mod: Any, name: str) -> Any:
    from codl_tvm import Plan

    texture, dim, ratio = PLANS[name]
    if name == "codl":
        return _codl_plan(mod)
    if dim is not None:
        return Plan.uniform(mod, dim, ratio)
    return Plan.single(mod, "cpu" if name == "cpu-only" else "gpu")


def build_model(model: str, out: Path, work: Path) -> dict[str, Any]:
    import warnings

    import codl_tvm

    specs = seeded_zoo_model(model, SEED, work / f"{model}.onnx")
    sources = draw(specs, SEED)
    mod = codl_tvm.load_model(work / f"{model}.onnx")
    index, lits, pairs = ValueIndex(sources), {}, _pairs()
    meta: dict[str, Any] = {"model": model, "seed": SEED, "sources": specs, "plans": {}}
    for name, (texture, _, _) in PLANS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # stated fallbacks
            exe = codl_tvm.compile(mod, pairs[texture], _plan(mod, name))
        folder = name.replace(" ", "-")
        exe.export(out / model / folder, weights=False, overwrite=True)
        params = {k: v.numpy() if hasattr(v, "numpy") else np.asarray(v)
                  for k, v in exe.params.items()}
        recs, missing = recipes(params, index, lits, LITERAL_MAX)
        if missing:
            raise RuntimeError(f"{model} {name}: parameters {missing} are no view of the "
                               "model's tensors and too large to carry")
        meta["plans"][name] = {"dir": folder, "params": recs}
    np.savez_compressed(out / model / "literals.npz", **lits)
    (out / model / "meta.json").write_text(json.dumps(meta) + "\n")
    return meta


def build(args: argparse.Namespace) -> int:
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        for model in args.models.split(","):
            t0 = time.time()
            build_model(model, out, Path(work))
            print(f"{model}: {len(PLANS)} artifacts, {time.time() - t0:.0f} s", flush=True)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote {out} ({size / 2**20:.1f} MiB)")
    return 0


def _rel_err(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
    return max(float(np.linalg.norm(g - r) / max(np.linalg.norm(r), 1e-30))
               for g, r in zip(got, ref, strict=True))


def run_model(folder: Path, device: str, plans: list[str] | None = None
              ) -> list[dict[str, Any]]:
    """The plans of one model (all; or ``plans`` and their references) on this process's
    OpenCL device."""
    import tvm

    from codl_tvm import runtime
    from codl_tvm.opencl_runtime import enable_opencl

    if not enable_opencl():
        raise RuntimeError("no OpenCL device in this process")
    meta = json.loads((folder / "meta.json").read_text())
    sources = draw(meta["sources"], meta["seed"])
    lits = np.load(folder / "literals.npz")
    outs, rows, inputs = {}, [], None
    wanted = set(meta["plans"]) if not plans else {"cpu-only", "gpu-only", *plans}
    for name, entry in meta["plans"].items():
        if name not in wanted:
            continue
        params = realize(entry["params"], sources, lits)
        runner = runtime.load(folder / entry["dir"], params=params)
        inputs = inputs or runtime.random_inputs(runner.manifest, seed=SEED)
        t0 = time.perf_counter()
        outs[name] = runner.run(inputs)
        seconds = time.perf_counter() - t0
        if name == "cpu-only":
            continue
        ref = "cpu-only" if name == "gpu-only" else "gpu-only"
        err = _rel_err(outs[name], outs[ref])
        tol = UNSPLIT_TOL if name == "gpu-only" else SPLIT_TOL
        rows.append({"model": meta["model"], "plan": name, "device": device, "rel_err": err,
                     "against": ref, "vs_cpu_only": _rel_err(outs[name], outs["cpu-only"]),
                     "ok": err <= tol, "first_run_s": round(seconds, 3),
                     "device_name": tvm.opencl(0).device_name})
        print(f"{meta['model']:20s} {name:17s} {device:14s} rel_err {err:.2e} (vs {ref}) "
              f"{'ok' if err <= tol else 'WRONG'}\n{ROW_MARK}{json.dumps(rows[-1])}", flush=True)
    return rows


def run(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    models = [m for m in args.models.split(",") if (folder / m / "meta.json").is_file()]
    if args.one:  # a child process: one model, each row as it comes (ROW_MARK + JSON)
        run_model(folder / models[0], args.device, args.plans and args.plans.split(","))
        return 0

    def one(model: str) -> tuple[list[dict[str, Any]], str | None]:
        cmd = [sys.executable, __file__, "run", str(folder), "--device", args.device,
               "--models", model, "--one", *(["--plans", args.plans] if args.plans else [])]
        why = None
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            out, code, err = proc.stdout, proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as e:  # the plans done before still count
            out, code, err = (e.stdout or b"").decode(), None, ""
            why = f"{model}: over {args.timeout} s"
        lines = out.splitlines()
        rows = [json.loads(x[len(ROW_MARK):]) for x in lines if x.startswith(ROW_MARK)]
        sys.stdout.write("".join(x + "\n" for x in lines if not x.startswith(ROW_MARK)))
        if code:
            why = f"{model}: exit {code}: {err.strip()[-400:]}"
        return rows, why

    # one process per model: a device crash costs one model, not the run
    with ThreadPoolExecutor(args.jobs) as pool:
        done = list(pool.map(one, models))
    rows = [r for got, _ in done for r in got]
    failed = [why for _, why in done if why]
    doc = {"device": args.device, "rows": rows, "failed": failed}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    for f in failed:
        print(f"FAILED {f}")
    return 0 if rows and not failed and all(r["ok"] for r in rows) else 1


def report(args: argparse.Namespace) -> int:
    """One table of the runs' rows; a later file's row replaces an earlier one's (a rerun)."""
    got: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in args.results:
        for r in json.loads(Path(path).read_text())["rows"]:
            got[r["model"], r["plan"], r["device"]] = r
    rows = list(got.values())
    devices = sorted({r["device"] for r in rows})
    expected = [p for p in PLANS if p != "cpu-only"]
    missing = [f"{d}: {m} {p}" for d in devices for m in MODELS for p in expected
               if (m, p, d) not in got]
    keep = ("model", "plan", "device", "rel_err", "against", "vs_cpu_only", "ok", "device_name")
    out = {"rows": [{k: r[k] for k in keep} for r in rows], "missing": missing}
    Path(args.output).write_text(json.dumps(out, indent=1) + "\n")
    print(f"| model | plan | {' | '.join(devices)} |\n|---|---|{'---|' * len(devices)}")
    for model in MODELS:
        for plan in expected:
            cells = [f"{got[model, plan, d]['rel_err']:.1e}"
                     + ("" if got[model, plan, d]["ok"] else " WRONG")
                     if (model, plan, d) in got else "-" for d in devices]
            print(f"| {model} | {plan} | {' | '.join(cells)} |")
    for m in missing:
        print(f"missing: {m}")
    return 0 if rows and not missing and all(r["ok"] for r in rows) else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("-o", "--output", default=".devcarry/opencl")
    b.add_argument("--models", default=",".join(MODELS))
    r = sub.add_parser("run")
    r.add_argument("folder")
    r.add_argument("--device", required=True,
                   help="label of this process's OpenCL device: nvidia-opencl, pocl, ...")
    r.add_argument("--models", default=",".join(MODELS))
    r.add_argument("--timeout", type=int, default=900, help="seconds per model")
    r.add_argument("--jobs", type=int, default=1, help="models run at once, a process each")
    r.add_argument("--plans", help="only these plans (comma-separated; their references too)")
    r.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    r.add_argument("-o", "--output",
                   default=os.path.join(os.environ.get("OUT", "."), "opencl.json"))
    rp = sub.add_parser("report")
    rp.add_argument("results", nargs="+")
    rp.add_argument("-o", "--output", default="benchmarks/results/opencl-verify.json")
    args = p.parse_args()
    return {"build": build, "run": run, "report": report}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
