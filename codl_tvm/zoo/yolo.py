"""YOLO-V2 (Redmon & Farhadi, CVPR'17): darknet-19 backbone at 416x416, 5 anchors x 25 (VOC).

Conv shapes follow the CoDL operator dataset (``workloads/conv2d.csv``), whose detection
head concatenates 1536 = 1024 + 512 channels at 13x13: the passthrough branch here is a
1x1 conv 512->128 at 26x26 followed by SpaceToDepth(2) (darknet's reorg; yolov2-voc.cfg
uses 64 channels and gets 1280). Conv + folded BN + LeakyReLU(0.1); the last conv is linear.
"""

from __future__ import annotations

from .layers import GraphBuilder, T

# (out_channels, kernel) per conv; "M" = 2x2/2 max pool.
DARKNET19 = [
    (32, 3), "M", (64, 3), "M", (128, 3), (64, 1), (128, 3), "M",
    (256, 3), (128, 1), (256, 3), "M",
    (512, 3), (256, 1), (512, 3), (256, 1), (512, 3), "PASSTHROUGH", "M",
    (1024, 3), (512, 1), (1024, 3), (512, 1), (1024, 3),
]  # fmt: skip


def build_yolo_v2(
    g: GraphBuilder, x: T, num_anchors: int = 5, num_classes: int = 20, passthrough: int = 128
) -> T:
    """Darknet-19 + YOLOv2 detection head; returns the raw (N, A*(C+5), H/32, W/32) map."""
    route = x
    for layer in DARKNET19:
        if layer == "M":
            x = g.pool(x, "max", 2, 2)
        elif layer == "PASSTHROUGH":
            route = x
        else:
            oc, k = layer
            x = g.conv(x, oc, k, pad="same", bn=True, act="leaky", bias=False)
    x = g.conv(x, 1024, 3, bn=True, act="leaky", bias=False)
    x = g.conv(x, 1024, 3, bn=True, act="leaky", bias=False)
    r = g.conv(route, passthrough, 1, bn=True, act="leaky", bias=False)
    n, c, h, w = r.shape
    r = g.op("SpaceToDepth", [r.name], (n, c * 4, h // 2, w // 2), blocksize=2)
    x = g.concat([r, x])
    x = g.conv(x, 1024, 3, bn=True, act="leaky", bias=False)
    return g.conv(x, num_anchors * (num_classes + 5), 1, act="none")
