"""``codl-tvm train`` and ``codl-tvm report``."""

from __future__ import annotations

import argparse
import json
import sys


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("samples", help="samples CSV from `codl-tvm profile`")
    parser.add_argument("--kind", default="codl", choices=["codl", "flops", "eop", "gbdt"])
    parser.add_argument("-o", "--output", required=True, help="predictor JSON")


def run_train(args: argparse.Namespace) -> int:
    from codl_tvm.outputs import check_output_file
    from codl_tvm.predictor import train

    check_output_file(args.output, [args.samples])  # before fitting
    p = train(args.samples, kind=args.kind, output=args.output)
    print(json.dumps({"kind": p.kind, "pair": p.pair_, "size_bytes": p.size_bytes,
                      "output": args.output}))  # fmt: skip
    return 0


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("predictor", help="predictor JSON from `codl-tvm train`")
    parser.add_argument("samples", help="samples CSV to evaluate on (same device pair)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def run_report(args: argparse.Namespace) -> int:
    from codl_tvm.predictor import report
    from codl_tvm.predictor.accuracy import format_table
    from codl_tvm.profiler import read_samples
    from codl_tvm.profiler.noise import format_noise, noise_rows

    rep = report(args.predictor, args.samples)
    if args.json:
        print(json.dumps(rep["rows"], indent=1))
        return 0
    print(format_table(rep))
    print()  # the ceiling: how often the samples agree with themselves
    print(format_noise(noise_rows(read_samples(args.samples))))
    return 0


def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("predictor", help="predictor JSON from `codl-tvm train`")
    parser.add_argument("samples", help="a few dozen samples profiled on the target now")
    parser.add_argument("-o", "--output", required=True, help="calibrated predictor JSON")
    parser.add_argument("--machine", help="machine facts detected on the target (default: the "
                        "SAMPLES.machine.json the profiler wrote beside SAMPLES, if any)")


def run_calibrate(args: argparse.Namespace) -> int:
    from codl_tvm.outputs import check_output_file
    from codl_tvm.predictor import load
    from codl_tvm.profiler import machine_facts, read_samples

    check_output_file(args.output, [args.predictor, args.samples])
    pred = load(args.predictor)
    rows = read_samples(args.samples, pair=pred.pair_)
    beside = machine_facts.facts_path(args.samples)
    facts_file = args.machine or (str(beside) if beside.exists() else None)
    facts = machine_facts.read(facts_file) if facts_file else None
    pred.calibrate(rows, machine=facts)
    pred.save(args.output, inputs=(args.predictor, args.samples))
    print(json.dumps({"pair": pred.pair_, "speed": pred.speed_, "samples": len(rows),
                      "machine": facts_file, "output": args.output}))  # fmt: skip
    return 0


# the lead wires these as `codl-tvm train` / `codl-tvm report`
add_arguments = add_train_arguments
run = run_train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codl_tvm.predictor")
    sub = parser.add_subparsers(dest="cmd", required=True)
    add_train_arguments(sub.add_parser("train", help="fit a predictor on samples"))
    add_report_arguments(sub.add_parser("report", help="accuracy of a predictor on samples"))
    add_calibrate_arguments(sub.add_parser("calibrate", help="scale a predictor to this machine"))
    args = parser.parse_args(argv)
    runs = {"train": run_train, "report": run_report, "calibrate": run_calibrate}
    try:
        return runs[args.cmd](args)
    except (OSError, ValueError) as err:  # a bad samples/predictor file: one line, as codl-tvm
        print(f"{parser.prog} {args.cmd}: error: {err}", file=sys.stderr)
        return 1
