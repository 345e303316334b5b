"""``codl-tvm train``, ``report`` and ``calibrate`` (library: :mod:`codl_tvm.predictor`)."""

from __future__ import annotations

import argparse
import json
import sys

from ..outputs import check_output_file
from . import Command


def _add_train(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("samples", help="samples CSV from `codl-tvm profile`")
    parser.add_argument("--kind", default="codl", choices=["codl", "flops", "eop", "gbdt"])
    parser.add_argument("-o", "--output", required=True, help="predictor JSON")


def _run_train(args: argparse.Namespace) -> int:
    from ..predictor import train
    from ..predictor.accuracy import few_sample_kernels, format_kernel_table, kernel_rows
    from ..profiler import machine_facts, read_samples

    check_output_file(args.output, [args.samples])  # before fitting
    rows = read_samples(args.samples)
    p = train(rows, kind=args.kind, output=args.output, machine=machine_facts.beside(args.samples),
              source=args.samples)
    print(json.dumps({"kind": p.kind, "pair": p.pair_, "size_bytes": p.size_bytes,
                      "output": args.output}))  # fmt: skip
    # stdout stays the one JSON line; the in-sample fit per kernel and its warnings go to stderr
    kernels = kernel_rows(p, rows)
    print(f"in-sample accuracy per kernel:\n{format_kernel_table(kernels)}", file=sys.stderr)
    for message in few_sample_kernels(kernels):
        print(f"warning: {message}", file=sys.stderr)
    return 0


def _add_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("predictor", help="predictor JSON from `codl-tvm train`")
    parser.add_argument("samples", help="samples CSV to evaluate on (same device pair)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON: "
                        "rows per processor and op, kernels per processor, op and algorithm")


def _run_report(args: argparse.Namespace) -> int:
    from ..predictor import load, report
    from ..predictor.accuracy import format_kernel_table, format_table
    from ..profiler import read_samples
    from ..profiler.noise import format_noise, noise_rows

    pred = load(args.predictor)
    rep = report(pred, read_samples(args.samples, pair=pred.pair_))
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(format_table(rep))
    print()  # the same per kernel (processor, op, algorithm)
    print(format_kernel_table(rep["kernels"]))
    print()  # the ceiling: how often the samples agree with themselves
    print(format_noise(noise_rows(read_samples(args.samples))))
    return 0


def _add_calibrate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("predictor", help="predictor JSON from `codl-tvm train`")
    parser.add_argument("samples", help="a few dozen samples profiled on the target now")
    parser.add_argument("-o", "--output", required=True, help="calibrated predictor JSON")
    parser.add_argument("--machine", help="machine facts detected on the target (default: the "
                        "SAMPLES.machine.json the profiler wrote beside SAMPLES, if any)")
    parser.add_argument("--no-gpu-passes", action="store_true",
                        help="one speed factor per processor only; by default a codl predictor "
                        "also measures how long the GPU's memory passes take on the target")
    parser.add_argument("--per-kernel", action="store_true",
                        help="also give each kernel with at least 10 samples here a factor of "
                        "its own over its processor's (see benchmarks/PREDICTOR.md)")
    parser.add_argument("--equal-weights", action="store_true",
                        help="each processor's factor is the plain median of measured / "
                        "predicted; by default each sample counts by its predicted time")


def _run_calibrate(args: argparse.Namespace) -> int:
    from ..predictor import load
    from ..profiler import machine_facts, read_samples

    check_output_file(args.output, [args.predictor, args.samples])
    pred = load(args.predictor)
    rows = read_samples(args.samples, pair=pred.pair_)
    beside = machine_facts.facts_path(args.samples)
    facts_file = args.machine or (str(beside) if beside.exists() else None)
    facts = machine_facts.read(facts_file) if facts_file else None
    pred.calibrate(rows, machine=facts, gpu_passes=not args.no_gpu_passes,
                   time_weighted=not args.equal_weights, per_kernel=args.per_kernel)
    pred.save(args.output, inputs=(args.predictor, args.samples))
    print(json.dumps({"pair": pred.pair_, "speed": pred.speed_, "samples": len(rows),
                      "machine": facts_file, "output": args.output}))  # fmt: skip
    return 0


COMMANDS = {
    "train": Command("train a latency predictor from samples", _add_train, _run_train),
    "report": Command("accuracy report of a predictor on samples", _add_report, _run_report),
    "calibrate": Command("scale a predictor's kernel times to the machine at hand (a few "
                         "samples profiled there)", _add_calibrate, _run_calibrate),
}

# ``python -m codl_tvm.predictor NAME`` (the names are the same)
MODULE_COMMANDS = COMMANDS
