"""Where a GPU-only anchors model spends its GPU time, kernel by kernel (CUPTI via PyTorch).

    python benchmarks/anchors_profile.py ARTIFACTS MODEL [--variant gpu] [--top 15] [--json F]

``ARTIFACTS`` is an ``anchors.py build`` folder; the model runs with the anchors' seeded weights
(drawn here), 10 warm-up calls, then 5 profiled calls. Kernels are grouped by name (TVM names a
kernel after its fused PrimFunc), and each group's GPU time per call is printed with its share
of the total; PyTorch replaying the same model (``torch-cuda``) is profiled too, for comparison.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import anchors_models as am  # noqa: E402

CALLS = 5


def kernel_times(fn) -> dict[str, float]:
    """GPU microseconds per call of each kernel name over ``CALLS`` calls of ``fn``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    out: dict[str, float] = defaultdict(float)
    for e in prof.events():
        if e.device_type.name == "CUDA":
            us = e.time_range.end - e.time_range.start
            out[re.sub(r"_kernel(_\d+)?$", "", e.name)] += us / CALLS
    return dict(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("artifacts")
    p.add_argument("model")
    p.add_argument("--variant", default="gpu", help="the codl build (gpu, gpu-graph-base, ...)")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--json", help="also write the full per-kernel times here")
    args = p.parse_args()
    import torch

    from codl_tvm import runtime

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    runtime.enable_cuda()
    folder = Path(args.artifacts) / args.model
    meta, lits, sources, inputs = am.seeded(folder)
    codl, _ = am.codl_engine(folder, meta, args.variant, sources, lits, inputs)
    engines = {f"codl-{args.variant}": codl}
    try:
        make, _ = am.torch_modules(meta, sources, lits)
        engines["torch-cuda"] = am.torch_engines(make, inputs, True)["torch-cuda"][0]
    except Exception as e:  # noqa: BLE001 - torchvision missing: codl-tvm alone
        print(f"torch: {e}")
    doc = {}
    for name, fn in engines.items():
        times = kernel_times(fn)
        total = sum(times.values())
        doc[name] = {"total_us": total, "kernels_us": times}
        print(f"\n{args.model} {name}: {total:.0f} us of GPU kernels per call, "
              f"{len(times)} kernel names")
        for k, us in sorted(times.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"  {us:8.1f} us {100 * us / total:5.1f}%  {k[:90]}")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
