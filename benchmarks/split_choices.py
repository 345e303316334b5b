"""How well a predictor chooses splits, judged on splits measured on the target.

``coexec_conv.py`` measured every YOLO-V2 conv shape GPU-only, CPU-only and at a grid of row
and channel splits on the GPU machine (``results/coexec-{edge,full}.json``); no predictor was
fitted on them. For each predictor file given, and each CPU speed the planner's candidates
assume (``planner.candidates``), this prices every measured split as the planner does (the
pair's copies and block copies, ``planner.api.for_pair``), takes the one it predicts fastest
(or the whole op on the GPU, where no split is predicted faster), and sums the *measured*
time of those choices over the shapes:

    python benchmarks/split_choices.py results/coexec-edge.json PRED.json [PRED2.json ...] \\
        -o results/split-choices-edge.json

It prints, per predictor, the GPU-only sum over the chosen splits' sum (the speedup the
choices reach) beside the best measured split of each shape (the ceiling), and per shape the
predicted / measured GPU-only and CPU-only times.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm.planner.candidates import CPU_SCALES  # noqa: E402 - after the path

SHAPE = re.compile(r"(\d+)x(\d+)x(\d+)-(\d+)-k(\d+)s(\d+)")


def measured(doc: dict) -> dict[str, dict]:
    """Per shape: ``cpu``, ``gpu`` (ms) and ``splits`` {(dim, ratio): ms} of the default
    build (no twin variant, no part alone)."""
    out: dict[str, dict] = {}
    for v in doc["variants"]:
        entry = out.setdefault(v["shape"], {"splits": {}})
        name = v["variant"]
        if name in ("cpu-only", "gpu-only"):
            entry[name[:3]] = v["latency_ms"]
        elif "@" in name and "/" not in name and ":" not in name:
            dim, ratio = name.split("@")
            entry["splits"][(dim, float(ratio))] = v["latency_ms"]
    return out


def node(shape: str):
    from codl_tvm.planner.nodes import OpNode
    from codl_tvm.predictor.opspec import OpSpec

    h, w, ic, oc, k, s = map(int, SHAPE.fullmatch(shape).groups())
    spec = OpSpec("conv2d", h, w, ic, oc, k, k, s, s, (k // 2,) * 4)
    return OpNode(shape, "conv2d", spec, 0, [1, ic, h, w], [1, oc, h // s, w // s],
                  ic * oc * k * k * 4, ("H", "OC"))  # fmt: skip


def choices(pred_path: str, shapes: dict[str, dict], cpu_scale: float) -> list[dict]:
    import codl_tvm
    from codl_tvm.planner.api import for_pair
    from codl_tvm.planner.candidates import ScaledCosts
    from codl_tvm.planner.costs import PredictorCosts
    from codl_tvm.planner.search import Evaluator
    from codl_tvm.predictor import load

    pair = codl_tvm.DevicePair("x86-cuda", {"kind": "llvm", "num-cores": 16},
                               {"kind": "cuda", "arch": "sm_90"})  # fmt: skip
    costs = for_pair(PredictorCosts(load(pred_path)), pair)
    ev = Evaluator(ScaledCosts(costs, cpu_scale))
    rows = []
    for shape, m in shapes.items():
        n = node(shape)
        priced = sorted((u.total_us, dim, ratio) for (dim, ratio) in m["splits"]
                        if (u := ev.unit([n], dim, ratio)) is not None)  # fmt: skip
        gpu_us = ev.whole(n, "gpu")
        split = priced[0] if priced and priced[0][0] < gpu_us else None
        rows.append({
            "shape": shape, "choice": f"{split[1]}@{split[2]:g}" if split else "gpu-only",
            "chosen_ms": m["splits"][split[1:]] if split else m["gpu"],
            "best_ms": min(m["gpu"], *m["splits"].values()), "gpu_ms": m["gpu"],
            "gpu_pred_over_meas": gpu_us / 1e3 / m["gpu"],
            "cpu_pred_over_meas": ev.whole(n, "cpu") / cpu_scale / 1e3 / m["cpu"],
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("coexec", help="results/coexec-edge.json (or -full)")
    ap.add_argument("predictors", nargs="+", help="predictor JSON files to judge")
    ap.add_argument("-o", "--output", help="JSON of every choice")
    args = ap.parse_args(argv)
    shapes = measured(json.loads(Path(args.coexec).read_text()))
    out = {"coexec": args.coexec, "predictors": {}}
    print("| predictor | CPU x | GPU-only / chosen | GPU-only / best | GPU pred/meas | "
          "CPU pred/meas |\n|---|---:|---:|---:|---|---|")
    for path in args.predictors:
        per = {}
        for scale in sorted({1.0, *CPU_SCALES}):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rows = choices(path, shapes, scale)
            gpu, chosen = sum(r["gpu_ms"] for r in rows), sum(r["chosen_ms"] for r in rows)
            best = sum(r["best_ms"] for r in rows)
            per[f"{scale:g}"] = {"speedup": gpu / chosen, "ceiling": gpu / best, "rows": rows}
            g = [r["gpu_pred_over_meas"] for r in rows]
            c = [r["cpu_pred_over_meas"] for r in rows]
            print(f"| {Path(path).name} | {scale:g} | {gpu / chosen:.3f} | {gpu / best:.3f} | "
                  f"{min(g):.2f}-{max(g):.2f} | {min(c):.2f}-{max(c):.2f} |")
        out["predictors"][Path(path).name] = per
    if args.output:
        from codl_tvm.outputs import write_text

        write_text(args.output, json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
