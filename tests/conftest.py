"""Shared test setup: every pass runs under TVM's well-formedness instrument."""

from __future__ import annotations

import pytest
import tvm
from tvm.relax.ir.instrument import WellFormedInstrument


def pytest_collection_modifyitems(config, items):
    if tvm.cuda(0).exist:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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
