"""Conv shapes of CNNs that no file of this project names, as a workload CSV.

A predictor's figure of merit is its accuracy on shapes no training row and no design choice
used. This script writes the dense (one-group) convs of torchvision's DenseNet-121 and
RegNet-X-800MF at 224x224 (their shapes, found by running the models on a zero input) in the
format of ``codl_tvm/data/workloads/conv2d.csv``, for ``codl-tvm profile-bundle --workload``::

    python benchmarks/blind_workload.py -o blind-conv2d.csv

Needs torch and torchvision (``pip install -e ".[torch]"``).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

MODELS = {"DENSENET-121": "densenet121", "REGNET-X-800MF": "regnet_x_800mf"}
COLUMNS = ("CNN", "IH", "IW", "IC", "OC", "KH", "KW", "SH", "SW", "PT", "PH", "PW", "DH", "DW")


def conv_rows(name: str, ctor: str, size: int = 224) -> list[dict[str, int | str]]:
    """One row per dense conv a forward pass of torchvision's ``ctor`` runs."""
    import torch
    import torchvision

    model = getattr(torchvision.models, ctor)().eval()
    rows: list[dict[str, int | str]] = []

    def hook(mod: torch.nn.Conv2d, inputs: tuple, _out: torch.Tensor) -> None:
        if mod.groups == 1:
            x = inputs[0]
            rows.append(dict(zip(COLUMNS, (
                name, x.shape[2], x.shape[3], mod.in_channels, mod.out_channels,
                *mod.kernel_size, *mod.stride, 0, 2 * mod.padding[0], 2 * mod.padding[1],
                *mod.dilation), strict=True)))  # PT 0: explicit padding, PH/PW its total

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, torch.nn.Conv2d)]  # fmt: skip
    with torch.no_grad():
        model(torch.zeros(1, 3, size, size))
    for h in handles:
        h.remove()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-o", "--output", required=True, type=Path)
    args = parser.parse_args()
    unique: dict[tuple, dict] = {}
    for name, ctor in MODELS.items():
        for row in conv_rows(name, ctor):
            unique.setdefault(tuple(v for k, v in row.items() if k != "CNN"), row)
    if args.output.exists():
        raise SystemExit(f"{args.output} exists: choose a new file")
    with args.output.open("x", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(unique.values())
    print(f"{len(unique)} convs -> {args.output}")


if __name__ == "__main__":
    main()
