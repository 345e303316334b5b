"""The CPU's depthwise conv writing its output rows in SIMD vectors
(``cpu_depthwise_vector_unpack``, the default) against the same kernel writing them column by
column, kernel by kernel, on MobileNet-V2's depthwise 3x3 convs (rows of 112, a whole number
of vectors, as the control; 56, 28, 14 and 7 columns, whose last vector is masked).

Each shape (+ bias + ReLU) is built both ways, checked against the unscheduled PrimFunc, and
timed interleaved with ``time_evaluator``, the caches flushed before each call (7 rounds of 30
calls, the median)::

    TVM_NUM_THREADS=2 python benchmarks/cpu_depthwise_unpack.py --mcpu znver4 --cores 2 \\
        -o benchmarks/results/cpu-depthwise-unpack.json

For a machine with only the TVM runtime, ``--build DIR`` here and ``--run DIR`` there::

    python benchmarks/cpu_depthwise_unpack.py --mcpu sapphirerapids --cores 16 --build DIR
    TVM_NUM_THREADS=16 python benchmarks/cpu_depthwise_unpack.py --run DIR -o OUT.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import depthwise_variant_ab  # noqa: E402

# (channels, input H = W, stride): MobileNet-V2's depthwise 3x3 convs, padding 1
SHAPES = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (192, 28, 2),
          (384, 14, 1), (576, 14, 2), (960, 7, 1)]
VARIANTS = {"vector": {}, "scalar": {"cpu_depthwise_vector_unpack": False}}

if __name__ == "__main__":
    depthwise_variant_ab.main(__doc__, SHAPES, VARIANTS)
