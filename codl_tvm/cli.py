"""The ``codl-tvm`` command: assembles the subcommands of :mod:`codl_tvm.commands`, parses
arguments and calls the library, nothing more."""

from __future__ import annotations

import argparse
import sys
import traceback
import warnings
from collections.abc import Mapping

from .commands import Command, artifact, demo, explain, plan, predictor, profile

# every command of the project, in --help order
COMMANDS: dict[str, Command] = {
    **demo.COMMANDS, **artifact.COMMANDS, **profile.COMMANDS, **predictor.COMMANDS,
    **explain.COMMANDS, **plan.COMMANDS,
}  # fmt: skip


def build_parser(prog: str = "codl-tvm",
                 commands: Mapping[str, Command] = COMMANDS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run one DNN inference on a CPU and a GPU at the same time (CoDL on TVM).",
    )
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, spec in commands.items():
        p = sub.add_parser(name, help=spec.help, description=spec.help)
        spec.add_arguments(p)
        p.set_defaults(func=spec.run)
    return parser


def main(argv: list[str] | None = None, *, prog: str = "codl-tvm",
         commands: Mapping[str, Command] = COMMANDS) -> int:
    """Parse ``argv`` and run the command; a user error is one line on stderr and exit 1.

    ``prog`` and ``commands`` serve the ``python -m codl_tvm.profiler`` / ``.predictor`` entry
    points, which offer some of the same commands under short names.
    """
    args = build_parser(prog, commands).parse_args(argv)
    try:
        with warnings.catch_warnings():
            if not args.verbose:  # a warning is one line, as the commands' own warnings
                warnings.showwarning = _one_line_warning
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # user-facing: one line unless --verbose
        if args.verbose:
            traceback.print_exc()
        print(f"{prog} {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 1


def _one_line_warning(message: Warning | str, *_: object, **__: object) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _one_line(err: Exception) -> str:
    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)  # no quotes
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
