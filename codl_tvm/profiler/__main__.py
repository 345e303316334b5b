"""``python -m codl_tvm.profiler profile|bundle|join|noise|resummarize``: the ``codl-tvm
profile*`` commands of :mod:`codl_tvm.commands.profile` under their short names."""

import sys

from codl_tvm.cli import main as cli_main
from codl_tvm.commands.profile import MODULE_COMMANDS


def main(argv: list[str] | None = None) -> int:
    return cli_main(argv, prog="python -m codl_tvm.profiler", commands=MODULE_COMMANDS)


if __name__ == "__main__":
    sys.exit(main())
