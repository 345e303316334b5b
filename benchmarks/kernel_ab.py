"""The command line of the kernel A/B scripts (``cpu_gemm_in_place.py``,
``cpu_depthwise_phases.py``, ``cpu_conv_rules.py``): build here and time here, or
``--build DIR`` here (the export written to a hidden sibling, renamed into place when
complete) and ``--run DIR`` on a machine with only the TVM runtime; ``-o`` writes a new JSON
file, never over an existing one."""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Callable
from pathlib import Path

Build = Callable[[dict, Path | None], list[dict]]
TimeCases = Callable[[list[dict], Path | None], list[dict]]


def parser(description: str) -> argparse.ArgumentParser:
    """The options every kernel A/B script takes; a script adds its own."""
    p = argparse.ArgumentParser(description=description.split("\n")[0])
    p.add_argument("--mcpu", help="llvm mcpu of the target, e.g. znver3")
    p.add_argument("--cores", type=int, help="num-cores of the target")
    p.add_argument("--build", type=Path, help="export the kernels to this new folder")
    p.add_argument("--run", type=Path, help="time the kernels of a --build folder")
    p.add_argument("-o", "--output", type=Path, help="results JSON (a new file)")
    return p


def run(p: argparse.ArgumentParser, args: argparse.Namespace, build: Build,
        time_cases: TimeCases, rounds: int, **fields) -> None:
    """Build, export or time as ``args`` ask; ``fields`` go into the results JSON."""
    if args.run is not None:
        cases = json.loads((args.run / "cases.json").read_text())
        target = cases[0].pop("target")
    else:
        if args.mcpu is None or args.cores is None:
            p.error("--mcpu and --cores name the target to build for")
        target = {"kind": "llvm", "mcpu": args.mcpu, "num-cores": args.cores}
        if args.build is not None:
            tmp = args.build.with_name(f".{args.build.name}.partial")
            tmp.mkdir(parents=True)  # fails on a leftover: never over another run's files
            cases = build(target, tmp)
            cases[0]["target"] = target
            (tmp / "cases.json").write_text(json.dumps(cases, indent=1))
            tmp.rename(args.build)  # complete, or not there at all
            print(f"wrote {args.build}")
            return
        cases = build(target, None)
    rows = time_cases(cases, args.run)
    if args.output is not None:
        doc = {"host": platform.processor() or platform.machine(), "target": target,
               "rounds": rounds, **fields, "rows": rows}
        with args.output.open("x") as f:  # never over an existing file
            json.dump(doc, f, indent=1)


def interleaved_us(calls: dict, rounds: int, repeat: int = 30) -> dict[str, float]:
    """Median microseconds of each ``name -> (module, args)``: the modules timed in turns,
    ``rounds`` turns of ``repeat`` calls, the caches flushed before each call (every
    argument but the first, as a model's earlier layers leave them)."""
    import numpy as np
    import tvm

    dev, times = tvm.cpu(), {k: [] for k in calls}
    for _ in range(rounds):
        for k, (mod, args) in calls.items():
            mod = mod.mod if hasattr(mod, "mod") else mod
            timer = mod.time_evaluator("main", dev, number=1, repeat=repeat,
                                       f_preproc="cache_flush_cpu_non_first_arg")
            times[k].append(float(np.median(timer(*args).results)) * 1e6)
    return {k: float(np.median(v)) for k, v in times.items()}


def rel_diff(a, b) -> float:
    """max |a - b| / max |a|."""
    import numpy as np

    return float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30))
