"""MobileNet-V1 (Howard et al. 2017) and MobileNet-V2 (Sandler et al., CVPR'18), 224x224.

Conv + folded BN + ReLU6 (Clip 0..6); depthwise convs are Conv with group = channels.
"""

from __future__ import annotations

from .layers import GraphBuilder, T

# (out_channels, stride) of each depthwise-separable block of MobileNet-V1.
V1_BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [
    (1024, 2), (1024, 1),
]  # fmt: skip

# (expansion t, out_channels c, repeats n, first stride s) of MobileNet-V2.
V2_SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
               (6, 160, 3, 2), (6, 320, 1, 1)]  # fmt: skip


def _cbr(g: GraphBuilder, x: T, oc: int, k: int, s: int = 1, group: int = 1, act="relu6") -> T:
    return g.conv(x, oc, k, s, pad=k // 2, group=group, bn=True, bias=False, act=act)


def build_mobilenet_v1(g: GraphBuilder, x: T, num_classes: int = 1000) -> T:
    """conv3x3/2 32, 13 depthwise-separable blocks, global pool, dense."""
    x = _cbr(g, x, 32, 3, 2)
    for oc, s in V1_BLOCKS:
        x = _cbr(g, x, x.shape[1], 3, s, group=x.shape[1])
        x = _cbr(g, x, oc, 1)
    return g.dense(g.flatten(g.global_avg_pool(x)), num_classes, act="none")


def _inverted_residual(g: GraphBuilder, x: T, t: int, oc: int, s: int) -> T:
    y = _cbr(g, x, x.shape[1] * t, 1) if t != 1 else x
    y = _cbr(g, y, y.shape[1], 3, s, group=y.shape[1])
    y = g.conv(y, oc, 1, pad=0, bn=True, bias=False, act="none", gain_scale=0.5)
    return g.binary("Add", x, y) if s == 1 and x.shape[1] == oc else y


def build_mobilenet_v2(g: GraphBuilder, x: T, num_classes: int = 1000) -> T:
    """conv3x3/2 32, 17 inverted residual blocks, conv1x1 1280, global pool, dense."""
    x = _cbr(g, x, 32, 3, 2)
    for t, c, n, s in V2_SETTINGS:
        for i in range(n):
            x = _inverted_residual(g, x, t, c, s if i == 0 else 1)
    x = _cbr(g, x, 1280, 1)
    return g.dense(g.flatten(g.global_avg_pool(x)), num_classes, act="none")
