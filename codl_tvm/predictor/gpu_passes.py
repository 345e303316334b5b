"""The GPU's memory passes: the terms that count bytes a kernel streams, and the factor by which
the target runs them slower than the machine their units were fitted on.

The waves terms of ``gpu_terms`` count the SMs a process may use (``Machine.active_sms``); the
bytes terms do not, and a few SMs pull bytes far slower than a whole GPU: a process held to 8
of the H200's SMs by CUDA MPS ran Winograd's transforms, at the same wave count, several times
as long against the full-GPU model while its FMA-bound kernels kept pace. ``codl-tvm
calibrate`` measures the factor on the target (:func:`fit_pass_speed`) and stores it in the
predictor's ``speed`` under :data:`PASS_SPEED`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from codl_tvm.predictor.blocking import term_column
from codl_tvm.predictor.mirror import GPU_WINOGRAD

# GPU model algorithm -> its terms (``blocking.TERM_NAMES``) that are memory passes
GPU_PASS_TERMS: dict[str, tuple[str, ...]] = {
    # outputs / split-K partials written, the sum pass's reads
    "gpu-conv-tiled": ("written", "written_odd_planes", "sum_reads"),
    GPU_WINOGRAD: ("input_transform", "weight_transform", "output_transform"),
    # input and output bytes, in the L2 and beyond it
    "pool": ("read", "written", "read_from_dram", "written_to_dram"),
    "elementwise": ("bytes_past_l2",),
}
# the same as columns of ``blocking.terms`` (t0 is column 0)
_PASS_COLUMNS = {algo: tuple(term_column("gpu", algo, name) for name in names)
                 for algo, names in GPU_PASS_TERMS.items()}  # fmt: skip
PASS_SPEED = "gpu-passes"  # the factor's key in a predictor's ``speed_``
# the factors calibration tries (steps of about 1.25x, up to the 16x of 8 SMs against 132)
PASS_SCALES = (1.0, 1.25, 1.6, 2.0, 2.5, 3.2, 4.0, 5.0, 6.4, 8.0, 10.0, 12.5, 16.0)


def scale_passes(x: list[float], algorithm: str, factor: float) -> list[float]:
    """``x``, the terms of a GPU ``algorithm`` kernel, with its passes ``factor`` times."""
    for i in _PASS_COLUMNS.get(algorithm, ()):
        x[i] *= factor
    return x


def fit_pass_speed(predict_us: Callable[[float], Sequence[float]],
                   measured_us: Sequence[float]) -> float:
    """The factor of :data:`PASS_SCALES` under which ``predict_us(factor)`` (the samples'
    kernel times, before any speed factor) best matches ``measured_us`` up to one common
    speed factor: the least mean absolute log ratio about its median. 1.0 for fewer than 3
    samples."""
    if len(measured_us) < 3:
        return 1.0
    measured = np.log(np.asarray(measured_us, dtype=float))
    errors = []
    for factor in PASS_SCALES:
        log_ratio = measured - np.log(np.asarray(predict_us(factor), dtype=float))
        errors.append(float(np.mean(np.abs(log_ratio - np.median(log_ratio)))))
    return PASS_SCALES[int(np.argmin(errors))]
