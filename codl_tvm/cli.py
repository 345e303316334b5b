"""The ``codl-tvm`` command: parses arguments and calls the library, nothing more."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable

import numpy as np


class UserError(Exception):
    """Bad input from the user: one line on stderr, exit code 1."""


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    report = run_demo(args.pair, dim=args.dim, ratio=args.ratio, chain=not args.no_chain)
    print(report.render())
    return 0 if report.rel_error <= 1e-5 else 2


def _cmd_compile(args: argparse.Namespace) -> int:
    from . import DevicePair, Plan, compile, load_model

    mod = load_model(args.model, shape=_shapes(args.shape))
    pair = DevicePair.preset(args.pair, arch=args.arch)
    plan = Plan.load(args.plan) if args.plan else None
    exe = compile(mod, pair, plan)
    path = exe.export(args.output)
    print(f"wrote {path} (pair {pair.name}, {len(exe.manifest['params'])} CPU weights)")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from . import runtime

    runner = runtime.load(args.artifact)
    if args.inputs:
        with np.load(args.inputs, allow_pickle=False) as npz:
            inputs = {k: npz[k] for k in npz.files}
    else:
        inputs = runner.random_inputs()
    outputs = runner.run(inputs)
    for i, out in enumerate(outputs):
        print(f"output_{i}: shape={list(out.shape)} dtype={out.dtype}")
    if args.output:
        np.savez(args.output, **{f"output_{i}": o for i, o in enumerate(outputs)})
    if args.time:
        print(f"median latency: {runner.time(inputs, repeat=args.repeat) * 1e3:.3f} ms")
    return 0


def _shapes(items: list[str] | None) -> dict[str, list[int]] | None:
    if not items:
        return None
    shapes = {}
    for item in items:
        name, _, dims = item.partition("=")
        try:
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise UserError(f"--shape {item!r}: expected NAME=D1,D2,...") from None
    return shapes


def _add_pair(p: argparse.ArgumentParser, default: str = "auto") -> None:
    p.add_argument("--pair", default=default,
                   help="device pair preset: cpu-pair, x86-cuda, android-opencl, android-adreno, "
                        "auto (default: %(default)s)")
    p.add_argument("--arch", help="CUDA arch such as sm_90 (detected when omitted)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codl-tvm",
        description="Run one DNN inference on a CPU and a GPU at the same time (CoDL on TVM).",
    )
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="partition a small CNN, check it, print the per-op plan")
    p.add_argument("--pair", default="auto", help="device pair (default: %(default)s)")
    p.add_argument("--dim", choices=["H", "OC"], default="H")
    p.add_argument("--ratio", type=float, default=0.5, help="GPU share (default: %(default)s)")
    p.add_argument("--no-chain", action="store_true", help="split each op on its own")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("compile", help="compile a model (ONNX) into an artifact folder")
    p.add_argument("model", help="ONNX file")
    _add_pair(p)
    p.add_argument("--plan", help="plan JSON (default: whole model on the GPU)")
    p.add_argument("--shape", action="append", help="input shape override NAME=D1,D2,...")
    p.add_argument("-o", "--output", required=True, help="artifact folder to write")
    p.set_defaults(func=_cmd_compile)

    p = sub.add_parser("run", help="run a compiled artifact")
    p.add_argument("artifact")
    p.add_argument("--inputs", help=".npz keyed by input name (random when omitted)")
    p.add_argument("-o", "--output", help="write outputs to this .npz")
    p.add_argument("--time", action="store_true", help="also print the median latency")
    p.add_argument("--repeat", type=int, default=20)
    p.set_defaults(func=_cmd_run)

    for name, hook in _EXTENSIONS.items():
        hook(sub, name)
    return parser


def _extension(module: str) -> Callable[[argparse._SubParsersAction, str], None]:
    """Subcommands whose arguments live beside their library code (profile, train, report)."""

    def hook(sub: argparse._SubParsersAction, name: str) -> None:
        import importlib

        try:
            mod = importlib.import_module(module, __package__)
        except ImportError:
            return
        p = sub.add_parser(name, help=getattr(mod, "HELP", {}).get(name, name))
        mod.add_arguments(name, p)
        p.set_defaults(func=lambda a: mod.run(name, a))

    return hook


_EXTENSIONS: dict[str, Callable] = {}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # user-facing: one line unless --verbose
        if args.verbose:
            traceback.print_exc()
        print(f"codl-tvm {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 1


def _one_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[-1] if text else type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
