"""The CPU's 1x1 GEMM with its unpack pass over whole channels (``cpu_gemm_flat_unpack``, the
default) against the same kernel unpacking row by row, kernel by kernel, on the 1x1 convs
whose images leave a pixel tail (the GEMM packs and unpacks those: MobileNet-V2's at 28x28,
14x14 and 7x7, YOLO-V2's at 13x13) and one that runs in place (56x56: the control).

Each shape (+ bias + ReLU) is built with the kernel the dispatch picks, both ways, each
reading its weight packed at load as in a model (the rule's weight pass run once), checked
against the unscheduled PrimFunc, and timed interleaved with ``time_evaluator``, the caches
flushed before each call (7 rounds of 30 calls, the median)::

    TVM_NUM_THREADS=2 python benchmarks/cpu_gemm_flat_unpack.py --mcpu znver4 --cores 2 \\
        -o benchmarks/results/cpu-gemm-flat-unpack.json

For a machine with only the TVM runtime, ``--build DIR`` here and ``--run DIR`` there::

    python benchmarks/cpu_gemm_flat_unpack.py --mcpu sapphirerapids --cores 16 --build DIR
    TVM_NUM_THREADS=16 python benchmarks/cpu_gemm_flat_unpack.py --run DIR -o OUT.json

``--shapes IC-OC-HW-1-1,...`` replaces the default shapes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import conv_variant_ab  # noqa: E402

# (IC, OC, input H = W, K, stride): MobileNet-V2's stride-1 1x1 convs at 28x28, 14x14 and 7x7
# (expansions and projections), YOLO-V2's 1024 -> 512 at 13x13, and 24 -> 144 at 56x56
# (in place, no passes: the control)
SHAPES = [(32, 192, 28, 1, 1), (192, 32, 28, 1, 1), (64, 384, 14, 1, 1), (384, 64, 14, 1, 1),
          (96, 576, 14, 1, 1), (576, 96, 14, 1, 1), (160, 960, 7, 1, 1), (960, 160, 7, 1, 1),
          (320, 1280, 7, 1, 1), (1024, 512, 13, 1, 1), (24, 144, 56, 1, 1)]
VARIANTS = {"flat": {}, "rows": {"cpu_gemm_flat_unpack": False}}

if __name__ == "__main__":
    conv_variant_ab.main(__doc__, SHAPES, VARIANTS)
