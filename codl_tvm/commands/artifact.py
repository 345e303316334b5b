"""``codl-tvm compile`` and ``codl-tvm run``."""

from __future__ import annotations

import argparse

import numpy as np

from . import Command, add_pair_arguments, parse_shapes


def _add_compile(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX file")
    add_pair_arguments(p)
    p.add_argument("--plan", help="plan JSON (default: whole model on the GPU)")
    p.add_argument("--shape", action="append", help="input shape override NAME=D1,D2,...")
    p.add_argument("-o", "--output", required=True, help="artifact folder to write")


def _run_compile(args: argparse.Namespace) -> int:
    from .. import DevicePair, Plan, compile, load_model

    mod = load_model(args.model, shape=parse_shapes(args.shape))
    pair = DevicePair.preset(args.pair, arch=args.arch)
    plan = Plan.load(args.plan) if args.plan else None
    exe = compile(mod, pair, plan)
    path = exe.export(args.output)
    print(f"wrote {path} (pair {pair.name}, {len(exe.manifest['params'])} weight tensors)")
    return 0


def _add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("artifact")
    p.add_argument("--inputs", help=".npz keyed by input name (random when omitted)")
    p.add_argument("-o", "--output", help="write outputs to this .npz (model order)")
    p.add_argument("--time", action="store_true", help="also print the median latency")
    p.add_argument("--repeat", type=int, default=20)


def _run_run(args: argparse.Namespace) -> int:
    from .. import runtime

    return runtime.main([args.artifact, *(["--inputs", args.inputs] if args.inputs else []),
                         *(["-o", args.output] if args.output else []),
                         *(["--time"] if args.time else []), "--repeat", str(args.repeat)])


COMMANDS = {
    "compile": Command("compile a model into an artifact folder", _add_compile, _run_compile),
    "run": Command("run a compiled artifact", _add_run, _run_run),
}
