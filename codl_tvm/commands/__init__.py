"""Subcommands of ``codl-tvm``: every command of the project is defined here, one module per
group.

=====================  ================================================================
module                 commands
=====================  ================================================================
:mod:`.demo`           ``demo``
:mod:`.artifact`       ``compile``, ``run``, ``rpc-server``; the runtime-only
                       ``python -m codl_tvm.runtime``, ``.deploy.server`` and
                       ``.planner.bundle``
:mod:`.profile`        ``profile``, ``profile-bundle``, ``profile-join``, ``profile-noise``,
                       ``profile-resummarize``
:mod:`.predictor`      ``train``, ``report``, ``calibrate``
:mod:`.explain`        ``explain``
:mod:`.plan`           ``plan``, ``bench``
=====================  ================================================================

Each module exposes ``COMMANDS: dict[name, Command]``; :mod:`codl_tvm.cli` assembles them.
A command's ``run(args) -> int`` calls the library and prints; it raises on user error (the CLI
turns that into one line on stderr and exit code 1). Nothing here imports TVM at module import
time (``codl-tvm SUB --help`` stays fast): the library is imported inside ``run``. Library
modules never import this one, except from the ``if __name__ == "__main__":`` block of a
``python -m`` entry module, which only dispatches here.
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


PAIR_HELP = ('device pair: a preset (cpu-pair, x86-cuda, x86-opencl, android-opencl, '
             'android-adreno, auto) '
             'or JSON target dicts \'{"cpu": {"kind": "llvm", ...}, "gpu": {"kind": "cuda", '
             '"arch": "sm_90"}}\'')


def add_pair_arguments(p: argparse.ArgumentParser, default: str = "auto") -> None:
    """``--pair`` and ``--arch``, as every command that builds or runs takes them."""
    p.add_argument("--pair", default=default, help=PAIR_HELP + " (default: %(default)s)")
    p.add_argument("--arch", help="CUDA arch such as sm_90 (detected when omitted)")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """MODEL and its shape flags, as every command that loads a model takes them
    (:func:`load_model`)."""
    p.add_argument("model", help="ONNX file, or a zoo model name (e.g. tiny-cnn, resnet-18)")
    p.add_argument("--batch", type=int, help="batch size (first dim of every input)")
    p.add_argument("--input-shape", type=int, nargs="+", metavar="N",
                   help="zoo model input (H W) or (C H W)")
    p.add_argument("--shape", action="append", help="input shape override NAME=D1,D2,...")


def load_model(args: argparse.Namespace):
    """The Relax module of ``args.model`` with the flags of :func:`add_model_arguments`
    (:func:`codl_tvm.zoo.load`, the one model resolver)."""
    from .. import zoo

    return zoo.load(args.model, batch=args.batch, input_shape=args.input_shape,
                    shapes=parse_shapes(args.shape))


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
