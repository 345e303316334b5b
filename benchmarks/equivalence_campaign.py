"""Equivalence campaign: random small CNNs x random plans on the cpu-pair, each compiled and
run against the unsplit model (relative error at most 1e-5, float32).

Models are chains of 1-4 layers drawn from conv2d (kernel 1/3/5, stride 1/2, dilation 1/2,
asymmetric padding, depthwise or grouped), max/avg pooling and bias + ReLU, with 1-16 channels
and 3-17 pixel sides, so one-row parts, wide halos and stride-2 splits come up often. Plans
place each op on the CPU, the GPU or split (rows or channels, any share), sometimes with
chains and with the inputs on either device. Every case is reproducible from its seed:

    python benchmarks/equivalence_campaign.py --cases 10000 --jobs 2 \\
        -o benchmarks/results/equivalence.json
    python benchmarks/equivalence_campaign.py --replay SEED      # one case, verbose

The JSON records the count, every mismatch or failure with its seed, and the command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TOLERANCE = 1e-5


def random_model(rng: np.random.Generator):
    """A random chain of layers on a random input; returns (module, input shape)."""
    from tvm import relax
    from tvm.relax import op as rop

    c, h, w = int(rng.integers(1, 17)), int(rng.integers(3, 18)), int(rng.integers(3, 18))
    shape = (1, c, h, w)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for _ in range(int(rng.integers(1, 5))):
                y = _layer(bb, y, rng, rop, relax)
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get(), shape


def _layer(bb, y, rng, rop, relax):
    _, c, h, w = (int(d) for d in y.ty.shape.values)
    kind = rng.choice(["conv", "conv", "conv", "pool"])
    if kind == "pool" and min(h, w) >= 2:
        k = int(rng.integers(2, min(3, h, w) + 1))
        s = int(rng.integers(1, 3))
        pad = [int(v) for v in rng.integers(0, k // 2 + 1, size=4)]
        op = rop.nn.max_pool2d if rng.random() < 0.5 else rop.nn.avg_pool2d
        return bb.emit(op(y, (k, k), (s, s), padding=pad))
    k = int(rng.choice([1, 3, 5]))
    dil = int(rng.choice([1, 1, 2]))
    reach = (k - 1) * dil + 1
    pad = [int(v) for v in rng.integers(0, reach // 2 + 2, size=4)]
    if h + pad[0] + pad[2] < reach or w + pad[1] + pad[3] < reach:
        pad = [reach, reach, reach, reach]
    groups = int(rng.choice([1, 1, c])) if c > 1 else 1
    oc = c if groups == c else int(rng.integers(1, 17))
    weight = rng.standard_normal((oc, c // groups, k, k)).astype("float32")
    y = bb.emit(rop.nn.conv2d(y, relax.const(weight), strides=int(rng.integers(1, 3)),
                              padding=pad, dilation=dil, groups=groups))
    if rng.random() < 0.5:
        bias = rng.standard_normal((1, oc, 1, 1)).astype("float32")
        y = bb.emit(rop.nn.relu(rop.add(y, relax.const(bias))))
    return y


def random_plan(mod, rng: np.random.Generator):
    from codl_tvm import Plan, list_ops
    from codl_tvm.plan import OpPlacement

    ops = list_ops(mod)
    if rng.random() < 0.3:
        plan = Plan.uniform(mod, str(rng.choice(["H", "OC"])), float(rng.uniform(0.05, 0.95)),
                            chain=True)
    else:
        plan = Plan.uniform(mod, "H", 0.5)
        plan.ops = {}
        for op in ops:
            place = str(rng.choice(["cpu", "gpu", "split", "split"]))
            plan.ops[op["id"]] = (OpPlacement("split", str(rng.choice(["H", "OC"])),
                                              float(rng.uniform(0.02, 0.98)))
                                  if place == "split" else OpPlacement(place))
    plan.io_device = str(rng.choice(["gpu", "cpu"]))
    return plan


def run_case(seed: int) -> dict:
    """One (model, plan) case: its relative error, or the error it raised."""
    import codl_tvm

    rng = np.random.default_rng(seed)
    pair = codl_tvm.DevicePair.preset("cpu-pair")
    try:
        mod, shape = random_model(rng)
        mod = codl_tvm.load_model(mod)
        plan = random_plan(mod, rng)
        x = rng.standard_normal(shape).astype("float32")
        with warnings.catch_warnings():  # shares that leave a device nothing run whole
            warnings.simplefilter("ignore")
            ref = codl_tvm.compile(mod, pair).run({"x": x})[0]
            out = codl_tvm.compile(mod, pair, plan).run({"x": x})[0]
        err = float(np.linalg.norm(out - ref) / max(float(np.linalg.norm(ref)), 1e-30))
        return {"seed": seed, "rel_error": err, "ok": err <= TOLERANCE,
                "splits": sum(p.place == "split" for p in plan.ops.values())}
    except Exception as err:  # noqa: BLE001 - a failure is a campaign result
        return {"seed": seed, "ok": False, "error": f"{type(err).__name__}: {err}"[-500:]}


def _chunk(seeds: list[int]) -> list[dict]:
    return [run_case(s) for s in seeds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0, help="first case's seed")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--replay", type=int, help="run one case and print it")
    parser.add_argument("-o", "--output", default=str(ROOT / "benchmarks" / "results" /
                                                      "equivalence.json"))
    args = parser.parse_args()
    if args.replay is not None:
        print(json.dumps(run_case(args.replay), indent=1))
        return
    from tqdm import tqdm

    from codl_tvm.outputs import write_json

    seeds = list(range(args.seed, args.seed + args.cases))
    chunks = [seeds[i:i + 50] for i in range(0, len(seeds), 50)]
    results: list[dict] = []
    t0 = time.time()
    with ProcessPoolExecutor(args.jobs) as pool, tqdm(total=len(seeds), desc="cases") as bar:
        for rows in pool.map(_chunk, chunks):
            results += rows
            bar.update(len(rows))
    bad = [r for r in results if not r["ok"]]
    doc = {"cases": len(results), "mismatches": [r for r in bad if "error" not in r],
           "failures": [r for r in bad if "error" in r],
           "split_ops": sum(r.get("splits", 0) for r in results),
           "worst_rel_error": max((r["rel_error"] for r in results if "rel_error" in r),
                                  default=None),
           "tolerance": TOLERANCE, "seconds": round(time.time() - t0),
           "command": " ".join(sys.argv)}
    write_json(args.output, doc)
    print(f"{doc['cases']} cases, {len(doc['mismatches'])} mismatches, "
          f"{len(doc['failures'])} failures, {doc['split_ops']} split ops, worst relative "
          f"error {doc['worst_rel_error']}; wrote {args.output}")


if __name__ == "__main__":
    main()
