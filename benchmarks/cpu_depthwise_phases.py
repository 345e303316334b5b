"""The CPU's strided depthwise conv with a phased input against a strided one, kernel by
kernel (``cpu_depthwise_phases``).

Phased, each padded input row holds its even and odd columns apart, so every window column
loads whole vectors; strided, each input vector is assembled lane by lane. This builds
MobileNet-V2's depthwise convs (+ bias + ReLU; stride 2, and stride 1 as a control: the
variant changes nothing there but the pad's cut column loop), checks both builds against the
unscheduled PrimFunc, and times them interleaved with ``time_evaluator``, the caches flushed
before each call (7 rounds of 30 calls, the median)::

    TVM_NUM_THREADS=2 python benchmarks/cpu_depthwise_phases.py --mcpu znver3 --cores 2 \\
        -o benchmarks/results/cpu-depthwise-phases.json

For a machine with only the TVM runtime (the GPU machine's CPU), ``--build DIR`` exports the
kernels, and ``--run DIR`` (runtime only) times them there and checks the two builds'
outputs against each other::

    python benchmarks/cpu_depthwise_phases.py --mcpu sapphirerapids --cores 16 --build DIR
    TVM_NUM_THREADS=16 python benchmarks/cpu_depthwise_phases.py --run DIR -o OUT.json
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import depthwise_ab  # noqa: E402
import kernel_ab  # noqa: E402

# (channels, input H = W, stride): MobileNet-V2's depthwise 3x3 convs, padding 1
SHAPES = [(96, 112, 2), (144, 56, 2), (192, 28, 2), (576, 14, 2),
          (32, 112, 1), (144, 56, 1), (384, 14, 1), (960, 7, 1)]
ROUNDS = 7
VARIANTS = {"phased": {}, "strided": {"cpu_depthwise_phases": False}}


def main() -> None:
    p = kernel_ab.parser(__doc__)
    kernel_ab.run(p, p.parse_args(),
                  functools.partial(depthwise_ab.build, shapes=SHAPES, variants=VARIANTS),
                  functools.partial(depthwise_ab.time_cases, labels=tuple(VARIANTS),
                                    rounds=ROUNDS), ROUNDS)


if __name__ == "__main__":
    main()
