"""The direct conv's gathered pad pass: ``mirror.pad_gathered`` against LLVM, and its rows.

    python benchmarks/pad_gather_report.py codl_tvm/data/samples-x86-cuda-h100.csv \
        benchmarks/results/deep-h100/deep-samples.csv \
        benchmarks/results/deep2-h100/deep2-samples.csv \
        benchmarks/results/body-h100/body-samples.csv \
        benchmarks/results/pointwise-h100/pointwise-samples.csv \
        --json benchmarks/results/pad-gather.json                                # ~2 min

Compiles the pad pass alone (``cpu_conv.padded_input``, or ``sampled_input`` for a 1x1 window
at stride > 1, scheduled as the kernel schedules it) for Sapphire Rapids, for every pad
geometry of the files' CPU direct-conv sub-ops and a grid
of copies (input rows 1-30, widths 3-80, keeping or dropping the last row and column); counts
the geometries whose compiled code gathers and where the rule disagrees. Then fits the codl
predictor on the first file and prints, per shape of its 1x1 stride-2 CPU rows, the median
predicted / measured latency and whether its full op's pad pass gathers.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codl_tvm.predictor import make  # noqa: E402
from codl_tvm.predictor.base import sub_spec  # noqa: E402
from codl_tvm.predictor.cpu_terms import direct_padded_in  # noqa: E402
from codl_tvm.predictor.mirror import Machine, pad_gathered, sampled  # noqa: E402
from codl_tvm.predictor.opspec import OpSpec  # noqa: E402
from codl_tvm.profiler import read_samples  # noqa: E402

TARGET = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 16,
          "mtriple": "x86_64-linux-gnu"}  # fmt: skip
GRID_ROWS = (1, 2, 3, 4, 5, 8, 9, 16, 17, 30)
# H, W, hp, wp, top, left, bottom+right, then stride and OW: 1 and wp for a copy, SH (= SW) and
# the output columns of a 1x1 window's sampled pass (``cpu_conv.sampled_input``)
Geometry = tuple[int, int, int, int, int, int, int, int, int]


def compiled_gathers(g: Geometry) -> bool:
    """Whether the pad pass of geometry ``g`` compiles to gathers."""
    import tvm
    from tvm import te
    from tvm.s_tir import Schedule

    from codl_tvm.schedules import testing
    from codl_tvm.schedules.analysis import Conv2DInfo
    from codl_tvm.schedules.cpu_conv import _parallel_spatial, padded_input, sampled_input

    h, w, hp, wp, top, left, _, st, ow = g
    c = Conv2DInfo(n=1, ic=8, h=h, w=w, oc=8, ic_per_group=8, kh=1, kw=1, stride=(st, st),
                   dilation=(1, 1), pad=(top, left, 0, 0), oh=hp if st > 1 else h,
                   ow=ow if st > 1 else w)  # fmt: skip
    x = te.placeholder((1, 8, h, w), name="x")
    xp = sampled_input(c, x, wp) if st > 1 else padded_input(c, x, hp, wp)
    sch = Schedule(te.create_prim_func([x, xp]))
    _parallel_spatial(sch, "codl_pad", None)
    lib = testing.build(sch.mod["main"], tvm.target.Target(TARGET))
    return "gather" in (lib.mod if hasattr(lib, "mod") else lib).inspect_source("asm")


def sample_geometries(rows: list[dict[str, Any]], m: Machine) -> dict[Geometry, OpSpec]:
    """The pad geometry of every CPU direct-conv sub-op of ``rows``, one sub-op each."""
    out: dict[Geometry, OpSpec] = {}
    for r in rows:
        if r["role"] != "cpu" or r["algorithm"] != "direct-nchwc" or r["groups"] != 1:
            continue
        s = sub_spec(r)
        hp, wp = direct_padded_in(s, m)
        st, ow = (s.SH, s.out_w) if sampled(s) else (1, wp)
        out.setdefault((s.H, s.W, hp, wp, s.pad[0], s.pad[1], s.pad[2] + s.pad[3], st, ow), s)
    return out


def grid() -> dict[Geometry, OpSpec]:
    """Plain copies: every row and column kept, or the last row and/or column dropped."""
    out = {}
    for h in GRID_ROWS:
        for w in range(3, 81):
            for dh, dw in ((0, 0), (1, 0), (0, 1), (1, 1)):
                if h - dh >= 1:
                    out[(h, w, h - dh, w - dw, 0, 0, 0, 1, w - dw)] = OpSpec("conv2d", h, w, 8, 8)
    return out


def check(geoms: dict[Geometry, OpSpec]) -> dict[str, Any]:
    gathered, wrong = 0, []
    for g, s in geoms.items():
        got = compiled_gathers(g)
        gathered += got
        if pad_gathered(s, g[2], g[3]) != got:
            wrong.append(list(g))
    return {"geometries": len(geoms), "gathered": gathered, "rule_wrong": wrong}


def stride2_shapes(rows: list[dict[str, Any]], m: Machine) -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = make("codl").fit(rows)
    test = [r for r in rows if r["role"] == "cpu" and r["op"] == "conv2d"
            and r["KH"] * r["KW"] == 1 and r["SH"] == 2]  # fmt: skip
    q = p.predict(test) / np.array([r["latency_us"] for r in test])
    by: dict[tuple[int, int, int, int], list[float]] = defaultdict(list)
    for r, x in zip(test, q, strict=True):
        by[(r["H"], r["W"], r["IC"], r["OC"])].append(float(x))
    out = []
    for (h, w, ic, oc), v in sorted(by.items()):
        s = OpSpec("conv2d", h, w, ic, oc, 1, 1, 2, 2)  # the whole op: the stratum pads none
        g = pad_gathered(s, *direct_padded_in(s, m))
        out.append({"H": h, "W": w, "IC": ic, "OC": oc, "rows": len(v),
                    "median_ratio": float(np.median(v)),
                    "acc10": float(np.mean(np.abs(np.array(v) - 1) <= 0.1)), "gathered": g})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("samples", type=Path, nargs="+", help="the training file first")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    m = Machine()
    files = [read_samples(p) for p in args.samples]
    geoms: dict[Geometry, OpSpec] = {}
    for rows in files:
        geoms.update(sample_geometries(rows, m))
    out = {"samples": check(geoms), "grid": check(grid()),
           "stride2_shapes": stride2_shapes(files[0], m)}  # fmt: skip
    for name in ("samples", "grid"):
        c = out[name]
        print(f"{name}: {c['geometries']} pad geometries, {c['gathered']} gather, "
              f"the rule wrong on {len(c['rule_wrong'])}")  # fmt: skip
    rows = out["stride2_shapes"]
    print("\n| HxW | IC | OC | rows | median pred/meas | acc10 | pad gathers |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['H']}x{r['W']} | {r['IC']} | {r['OC']} | {r['rows']} "
              f"| {r['median_ratio']:.2f} | {100 * r['acc10']:.0f}% "
              f"| {'yes' if r['gathered'] else ''} |")
    n = sum(r["rows"] for r in rows)
    print(f"\nin-sample acc10 of the {n} rows: "
          f"{100 * sum(r['acc10'] * r['rows'] for r in rows) / n:.1f}%")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
