"""``python -m codl_tvm.profiler profile|bundle|join|noise|resummarize``: the ``codl-tvm
profile*`` commands of :mod:`codl_tvm.commands.profile` under their short names.

Only an entry point: the command line lives in :mod:`codl_tvm.cli`, which the profiler's
library modules never import.
"""

if __name__ == "__main__":
    import sys

    from codl_tvm.cli import main
    from codl_tvm.commands.profile import MODULE_COMMANDS

    sys.exit(main(prog="python -m codl_tvm.profiler", commands=MODULE_COMMANDS))
