"""Shared test setup: every pass runs under TVM's well-formedness instrument."""

from __future__ import annotations

import pytest
import tvm
from tvm.relax.ir.instrument import WellFormedInstrument


def pytest_collection_modifyitems(config, items):
    from codl_tvm.opencl_runtime import enable_opencl

    missing = {"gpu": None if tvm.cuda(0).exist else "needs a CUDA GPU"}
    if any("opencl" in item.keywords for item in items):
        missing["opencl"] = None if enable_opencl() else (
            "needs an OpenCL device and the runtime plugin (tools/opencl-runtime/build.sh)")
    for item in items:
        for mark, why in missing.items():
            if why and mark in item.keywords:
                item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(autouse=True)
def well_formed_passes():
    """Check that each pass gets and returns a well-formed module (as apache/tvm's relax tests)."""
    current = tvm.transform.PassContext.current()
    instruments = [*current.instruments, WellFormedInstrument(validate_before_transform=True)]
    with tvm.transform.PassContext(
        opt_level=current.opt_level,
        required_pass=current.required_pass,
        disabled_pass=current.disabled_pass,
        instruments=instruments,
        config=current.config,
    ):
        yield
