"""Models in from PyTorch: ``torch.export`` and TVM's Relax ``from_exported_program``.

Needs the ``torch`` extra (``pip install codl-tvm[torch]``); nothing here imports torch until
it is called. The module that comes out is what :func:`codl_tvm.load_model` makes of an ONNX
file: weights bound as constants, batch norms decomposed, constants folded, so plans, the
planner and every command treat both alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tvm

from .frontend import OUTPUT_NAMES_ATTR, ModelError, load_model


def from_torch(module: Any, example_inputs: Sequence[Any]) -> tvm.IRModule:
    """Load a ``torch.nn.Module`` as a Relax module ready for partitioning.

    Parameters
    ----------
    module : torch.nn.Module
        Put in eval mode and exported with ``torch.export.export`` (static shapes: those of
        ``example_inputs``).
    example_inputs : sequence of torch.Tensor
        One tensor per positional input of ``module.forward``.

    Returns
    -------
    IRModule
        As :func:`codl_tvm.load_model` returns; outputs are named as the exported program
        names them.
    """
    try:
        import torch
        from tvm.relax.frontend.torch import from_exported_program
    except ImportError as err:
        raise ModelError(f"from_torch needs PyTorch: pip install codl-tvm[torch] ({err})") from None
    module = module.eval()
    try:
        with torch.no_grad():
            program = torch.export.export(module, tuple(example_inputs))
        mod = from_exported_program(program, unwrap_unit_return_tuple=True)
    except Exception as err:  # export and import raise many unrelated types
        raise ModelError(f"could not export or import the module: {err}") from None
    outputs = list(program.graph_signature.user_outputs)
    return load_model(mod.with_attr(OUTPUT_NAMES_ATTR, outputs))
