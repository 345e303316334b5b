"""The ``codl-tvm`` command: assembles the subcommands of :mod:`codl_tvm.commands`, parses
arguments and calls the library, nothing more."""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

# command modules, in --help order (each exposes COMMANDS)
COMMAND_MODULES = (
    "codl_tvm.commands.demo",
    "codl_tvm.commands.predict",
    "codl_tvm.commands.artifact",
)
OPTIONAL_MODULES = (
    "codl_tvm.commands.explain",
    "codl_tvm.planner.cli",
    "codl_tvm.deploy.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codl-tvm",
        description="Run one DNN inference on a CPU and a GPU at the same time (CoDL on TVM).",
    )
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES + OPTIONAL_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if name in OPTIONAL_MODULES and err.name is not None and name.startswith(err.name):
                continue
            raise
        for cmd, spec in module.COMMANDS.items():
            p = sub.add_parser(cmd, help=spec.help, description=spec.help)
            spec.add_arguments(p)
            p.set_defaults(func=spec.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)  # no quotes
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
