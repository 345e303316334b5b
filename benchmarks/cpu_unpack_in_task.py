"""The CPU's direct conv with each task unpacking its own register tile
(``cpu_unpack_in_task``, the default) against the same kernel writing a packed result that a
pass of its own unpacks, kernel by kernel (``conv_variant_ab.py``: the kernel the dispatch
picks, + bias + ReLU, weights packed at load, caches flushed before each call, 7 rounds of 30
calls, the median)::

    TVM_NUM_THREADS=2 python benchmarks/cpu_unpack_in_task.py --mcpu znver3 --cores 2 \\
        -o benchmarks/results/cpu-unpack-in-task.json

For a machine with only the TVM runtime, ``--build DIR`` here and ``--run DIR`` there::

    python benchmarks/cpu_unpack_in_task.py --mcpu sapphirerapids --cores 16 --build DIR
    TVM_NUM_THREADS=16 python benchmarks/cpu_unpack_in_task.py --run DIR -o OUT.json

``--shapes IC-OC-HW-K-S,...`` (input H = W, K x K window, stride S, padding K // 2) replaces
the default shapes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import conv_variant_ab  # noqa: E402

# (IC, OC, input H = W, K, stride): the first convs of ResNet-18 (7x7 stride 2), MobileNet-V2
# (3x3 stride 2), YOLO-V2 (3->32 at 416, 32->64 at 208) and VGG-16 (3->64 at 224), ResNet-18's
# stride-2 3x3 and 1x1 convs, a 3x3 32->64 at 56x56
SHAPES = [(3, 64, 224, 7, 2), (3, 32, 224, 3, 2), (3, 32, 416, 3, 1), (32, 64, 208, 3, 1),
          (3, 64, 224, 3, 1), (64, 128, 56, 3, 2), (128, 256, 28, 1, 2), (256, 512, 14, 3, 2),
          (32, 64, 56, 3, 1)]
VARIANTS = {"in_task": {}, "pass": {"cpu_unpack_in_task": False}}

if __name__ == "__main__":
    conv_variant_ab.main(__doc__, SHAPES, VARIANTS)
