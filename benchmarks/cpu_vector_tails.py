"""The CPU kernels' write-out loops vectorised piece by piece (``cpu_vector_tails``, the
default) against the same kernels leaving those loops to LLVM, kernel by kernel.

Where the vector width does not divide an output row (7, 14, 28 columns on 16 lanes), LLVM
vectorised the loop around the write-out instead, with masked gathers and scatters on
AVX-512. This builds MobileNet-V2's 1x1 convs below 56x56 and its depthwise 3x3 convs, a
stride-2 stem, ResNet-18's and YOLO-V2's Winograd shapes (+ bias + ReLU) both ways, checks
each against the unscheduled PrimFunc, and times them interleaved with ``time_evaluator``,
the caches flushed before each call (7 rounds of 30 calls, the median); dense convs read
their weight packed at load as in a model::

    TVM_NUM_THREADS=2 python benchmarks/cpu_vector_tails.py --mcpu znver4 --cores 2 \\
        -o benchmarks/results/cpu-vector-tails.json

For a machine with only the TVM runtime, ``--build DIR`` here and ``--run DIR`` there, as
``cpu_even_tiles.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import conv_variant_ab  # noqa: E402
import depthwise_ab  # noqa: E402
import kernel_ab  # noqa: E402

# (IC, OC, input H = W, K, stride), padding K // 2
DENSE = [(96, 24, 56, 1, 1), (144, 32, 28, 1, 1), (32, 192, 28, 1, 1), (192, 64, 14, 1, 1),
         (64, 384, 14, 1, 1), (384, 64, 14, 1, 1), (96, 576, 14, 1, 1), (576, 96, 14, 1, 1),
         (576, 160, 7, 1, 1), (160, 960, 7, 1, 1), (960, 160, 7, 1, 1), (320, 1280, 7, 1, 1),
         (1024, 125, 13, 1, 1), (3, 32, 224, 3, 2), (64, 64, 56, 3, 1), (256, 256, 14, 3, 1),
         (512, 512, 7, 3, 1), (256, 512, 13, 3, 1)]
# (channels, input H = W, stride): MobileNet-V2's depthwise 3x3 convs, padding 1
DEPTHWISE = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1),
             (192, 28, 2), (384, 14, 1), (576, 14, 1), (576, 14, 2), (960, 7, 1)]
VARIANTS = {"tails": {}, "llvm": {"cpu_vector_tails": False}}
LABELS = tuple(VARIANTS)
ROUNDS = 7


def build(spec: dict, folder: Path | None) -> list[dict]:
    """The dense convs' cases (``conv_variant_ab``), then the depthwise ones
    (``depthwise_ab``)."""
    return (conv_variant_ab.build(spec, folder, DENSE, VARIANTS)
            + depthwise_ab.build(spec, folder, DEPTHWISE, VARIANTS))


def time_cases(cases: list[dict], folder: Path | None) -> list[dict]:
    dense = [c for c in cases if "depthwise" not in c]
    rows = conv_variant_ab.time_cases(dense, folder, LABELS, ROUNDS)
    print()
    rows += depthwise_ab.time_cases([c for c in cases if "depthwise" in c], folder, LABELS,
                                    ROUNDS)
    ratios = [r["ratio"] for r in rows]
    print(f"\ngeometric mean {LABELS[0]} / {LABELS[1]}: "
          f"{float(np.exp(np.mean(np.log(ratios)))):.2f} over {len(rows)} kernels")
    return rows


def main() -> None:
    p = kernel_ab.parser(__doc__)
    kernel_ab.run(p, p.parse_args(), build, time_cases, ROUNDS)


if __name__ == "__main__":
    main()
