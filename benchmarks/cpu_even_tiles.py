"""The CPU's conv kernels with register tiles shared evenly (``cpu_even_tiles``, the
default) against the same kernels with their last tile padded, kernel by kernel, on convs
whose output columns (direct conv) or 2x2 tiles (Winograd) the change re-tiles.

Each shape (+ bias + ReLU) is built with the kernel the dispatch picks, both ways, each
reading its weight packed at load as in a model (the rule's weight pass run once), checked
against the unscheduled PrimFunc, and timed interleaved with ``time_evaluator``, the caches
flushed before each call (7 rounds of 30 calls, the median)::

    TVM_NUM_THREADS=2 python benchmarks/cpu_even_tiles.py --mcpu znver3 --cores 2 \\
        -o benchmarks/results/cpu-even-tiles.json

For a machine with only the TVM runtime, ``--build DIR`` here and ``--run DIR`` there::

    python benchmarks/cpu_even_tiles.py --mcpu sapphirerapids --cores 16 --build DIR
    TVM_NUM_THREADS=16 python benchmarks/cpu_even_tiles.py --run DIR -o OUT.json

``--shapes IC-OC-HW-K-S,...`` (input H = W, K x K window, stride S, padding K // 2) replaces
the default shapes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import conv_variant_ab  # noqa: E402

# (IC, OC, input H = W, K, stride): ResNet-18's stride-2 3x3 and 1x1 convs to 14x14 and 7x7
# (direct; 6 columns a tile on 16 registers), its 3x3 convs at 7x7 and 14x14 and YOLO-V2's
# at 13x13 and 26x26 (Winograd; 14 tiles a block on 32 registers), a 3x3 32->64 at 56x56
# (direct; re-tiled nowhere: the control)
SHAPES = [(128, 256, 28, 3, 2), (256, 512, 14, 3, 2), (128, 256, 28, 1, 2), (256, 512, 14, 1, 2),
          (512, 512, 7, 3, 1), (256, 256, 14, 3, 1), (1024, 1024, 13, 3, 1),
          (512, 512, 26, 3, 1), (32, 64, 56, 3, 1)]
VARIANTS = {"even": {}, "padded": {"cpu_even_tiles": False}}

if __name__ == "__main__":
    conv_variant_ab.main(__doc__, SHAPES, VARIANTS)
