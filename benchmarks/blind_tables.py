"""A second blind workload: the dense convs of GoogLeNet and EfficientNet-B0, from their papers.

``blind_workload.py`` reads DenseNet-121's and RegNet-X-800MF's convs off torchvision; the
predictor's design was then checked against them, so they are no longer blind. This script
writes the one-group convs of two more CNNs at 224x224 from their published layer tables
(no torch needed), in the format of ``codl_tvm/data/workloads/conv2d.csv``:

- GoogLeNet (Szegedy et al. 2015, Table 1, as torchvision builds it: the "5x5" branch is a
  3x3 conv);
- EfficientNet-B0 (Tan and Le 2019, Table 1): stem, the MBConv blocks' 1x1 expansions and
  projections, head. Depthwise convs (many groups) and the squeeze-and-excitation convs over
  one pixel are left out.

Shapes that ``codl_tvm/data/workloads`` or the first blind file hold are dropped::

    python benchmarks/blind_tables.py -o blind2-conv2d.csv
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

COLUMNS = ("CNN", "IH", "IW", "IC", "OC", "KH", "KW", "SH", "SW", "PT", "PH", "PW", "DH", "DW")
ROOT = Path(__file__).resolve().parent.parent
KNOWN = (*sorted((ROOT / "codl_tvm" / "data" / "workloads").glob("conv2d*.csv")),
         ROOT / "benchmarks" / "results" / "blind-h200" / "blind-conv2d.csv")  # fmt: skip

# GoogLeNet's inception modules: (input pixels, in, 1x1, 3x3 reduce, 3x3, "5x5" reduce,
# "5x5", pool projection)
INCEPTION = (
    (28, 192, 64, 96, 128, 16, 32, 32), (28, 256, 128, 128, 192, 32, 96, 64),
    (14, 480, 192, 96, 208, 16, 48, 64), (14, 512, 160, 112, 224, 24, 64, 64),
    (14, 512, 128, 128, 256, 24, 64, 64), (14, 512, 112, 144, 288, 32, 64, 64),
    (14, 528, 256, 160, 320, 32, 128, 128), (7, 832, 256, 160, 320, 32, 128, 128),
    (7, 832, 384, 192, 384, 48, 128, 128),
)
# EfficientNet-B0's stages: (expansion, output channels, blocks, first stride, depthwise k)
MBCONV = ((1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3),
          (6, 112, 3, 1, 5), (6, 192, 4, 2, 5), (6, 320, 1, 1, 3))  # fmt: skip

Conv = tuple[int, int, int, int, int]  # (input pixels a side, IC, OC, kernel, stride)


def googlenet() -> list[Conv]:
    convs: list[Conv] = [(224, 3, 64, 7, 2), (56, 64, 64, 1, 1), (56, 64, 192, 3, 1)]
    for hw, cin, c1, r3, c3, r5, c5, pp in INCEPTION:
        convs += [(hw, cin, c1, 1, 1), (hw, cin, r3, 1, 1), (hw, r3, c3, 3, 1),
                  (hw, cin, r5, 1, 1), (hw, r5, c5, 3, 1), (hw, cin, pp, 1, 1)]  # fmt: skip
    return convs


def efficientnet_b0() -> list[Conv]:
    convs: list[Conv] = [(224, 3, 32, 3, 2)]
    hw, cin = 112, 32
    for t, c, n, s, _k in MBCONV:
        for i in range(n):
            stride = s if i == 0 else 1
            if t != 1:
                convs.append((hw, cin, cin * t, 1, 1))
            hw = -(-hw // stride)
            convs.append((hw, cin * t, c, 1, 1))
            cin = c
    return [*convs, (hw, cin, 1280, 1, 1)]


def row(cnn: str, conv: Conv) -> dict[str, int | str]:
    hw, ic, oc, k, s = conv
    pad = k - 1  # "same" padding, as both CNNs pad: PH/PW are the totals
    return dict(zip(COLUMNS, (cnn, hw, hw, ic, oc, k, k, s, s, 0, pad, pad, 1, 1), strict=True))


def _key(r: dict[str, str | int]) -> tuple[str, ...]:
    return tuple(str(r[c]) for c in COLUMNS[1:])


def known_shapes(paths: tuple[Path, ...] = KNOWN) -> set[tuple[str, ...]]:
    """The shapes of the workload files the project already measures or trains on."""
    out: set[tuple[str, ...]] = set()
    for path in paths:
        with path.open() as f:
            out |= {_key(r) for r in csv.DictReader(f) if "IH" in r}
    return out


def blind_rows() -> list[dict[str, int | str]]:
    seen = known_shapes()
    rows: list[dict[str, int | str]] = []
    for cnn, convs in (("GOOGLENET", googlenet()), ("EFFICIENTNET-B0", efficientnet_b0())):
        for conv in convs:
            r = row(cnn, conv)
            if _key(r) not in seen:
                seen.add(_key(r))
                rows.append(r)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-o", "--output", required=True, type=Path)
    args = parser.parse_args()
    rows = blind_rows()
    with args.output.open("x", newline="") as f:  # never over an existing file
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} convs -> {args.output}")


if __name__ == "__main__":
    main()
