"""CPU-only latency of a zoo model on the cpu-pair built for generic x86-64 against the same
pair built for this host's CPU (``mcpu``, what the preset detects), compiled in one process
and timed in interleaved rounds. Prints a table and writes JSON.

    python benchmarks/host_mcpu.py [--model resnet-18] [-o benchmarks/results/host-mcpu.json]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet-18")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-o", "--output", default=str(ROOT / "benchmarks" / "results" /
                                                      "host-mcpu.json"))
    args = parser.parse_args()
    import codl_tvm
    from codl_tvm import zoo
    from codl_tvm.device import DevicePair
    from codl_tvm.outputs import write_json

    warnings.simplefilter("ignore")
    mod = codl_tvm.load_model(zoo.get(args.model))
    host = DevicePair.preset("cpu-pair")
    generic = {k: v for k, v in host.cpu_spec.items() if k != "mcpu"}
    pairs = {"generic x86-64": DevicePair("cpu-pair", dict(generic), dict(generic), cpu_index=0,
                                          gpu_index=1),
             f"mcpu {host.cpu_spec['mcpu']}": host}
    exes = {n: codl_tvm.compile(mod, p, codl_tvm.Plan.single(mod, "cpu")) for n, p in pairs.items()}
    inputs = next(iter(exes.values())).random_inputs()
    times: dict[str, list[float]] = {n: [] for n in exes}
    for _ in range(args.rounds):  # interleaved: both builds once per round
        for n, exe in exes.items():
            times[n].append(exe.time(inputs, repeat=10))
    rows = [{"build": n, "latency_ms": 1e3 * float(np.median(t))} for n, t in times.items()]
    for r in rows:
        print(f"{args.model}  {r['build']:20s} {r['latency_ms']:8.1f} ms")
    write_json(args.output, {"model": args.model, "pair": host.to_json(), "rows": rows,
                             "command": " ".join(sys.argv)})


if __name__ == "__main__":
    main()
