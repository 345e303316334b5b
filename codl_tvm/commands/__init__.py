"""Subcommands of ``codl-tvm``, one module per group.

Each module exposes ``COMMANDS: dict[name, Command]``; :mod:`codl_tvm.cli` assembles them.
A command's ``run(args) -> int`` calls the library and prints; it raises on user error (the CLI
turns that into one line on stderr and exit code 1).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


PAIR_HELP = ('device pair: a preset (cpu-pair, x86-cuda, android-opencl, android-adreno, auto) '
             'or JSON target dicts \'{"cpu": {"kind": "llvm", ...}, "gpu": {"kind": "cuda", '
             '"arch": "sm_90"}}\'')


def add_pair_arguments(p: argparse.ArgumentParser, default: str = "auto") -> None:
    """``--pair`` and ``--arch``, as every command that builds or runs takes them."""
    p.add_argument("--pair", default=default, help=PAIR_HELP + " (default: %(default)s)")
    p.add_argument("--arch", help="CUDA arch such as sm_90 (detected when omitted)")


def parse_shapes(items: list[str] | None) -> dict[str, list[int]] | None:
    """``NAME=D1,D2,...`` overrides into a dict."""
    if not items:
        return None
    shapes = {}
    for item in items:
        name, _, dims = item.partition("=")
        try:
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise ValueError(f"--shape {item!r}: expected NAME=D1,D2,...") from None
    return shapes
