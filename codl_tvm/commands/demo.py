"""``codl-tvm demo``."""

from __future__ import annotations

import argparse

from . import Command


def _add(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default="auto", help="device pair (default: %(default)s)")
    p.add_argument("--dim", choices=["H", "OC"], default="H")
    p.add_argument("--ratio", type=float, default=0.5, help="GPU share (default: %(default)s)")
    p.add_argument("--no-chain", action="store_true", help="split each op on its own")


def _run(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    report = run_demo(args.pair, dim=args.dim, ratio=args.ratio, chain=not args.no_chain)
    print(report.render())
    return 0 if report.rel_error <= 1e-5 else 2


COMMANDS = {"demo": Command("partition a small CNN, check it, print the per-op plan", _add, _run)}
