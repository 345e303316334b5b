"""``python -m codl_tvm.predictor train|report|calibrate``: the same commands as ``codl-tvm
train|report|calibrate`` (:mod:`codl_tvm.commands.predictor`)."""

import sys

from codl_tvm.cli import main as cli_main
from codl_tvm.commands.predictor import MODULE_COMMANDS


def main(argv: list[str] | None = None) -> int:
    return cli_main(argv, prog="python -m codl_tvm.predictor", commands=MODULE_COMMANDS)


if __name__ == "__main__":
    sys.exit(main())
