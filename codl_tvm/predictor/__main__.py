"""``python -m codl_tvm.predictor train|report|calibrate``: the same commands as ``codl-tvm
train|report|calibrate`` (:mod:`codl_tvm.commands.predictor`).

Only an entry point: the command line lives in :mod:`codl_tvm.cli`, which the predictor's
library modules never import.
"""

if __name__ == "__main__":
    import sys

    from codl_tvm.cli import main
    from codl_tvm.commands.predictor import MODULE_COMMANDS

    sys.exit(main(prog="python -m codl_tvm.predictor", commands=MODULE_COMMANDS))
