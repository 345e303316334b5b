"""ResNet-18 (He et al., CVPR'16), torchvision layout, 224x224, 1000 classes."""

from __future__ import annotations

from .layers import GraphBuilder, T


def _basic_block(g: GraphBuilder, x: T, oc: int, stride: int) -> T:
    y = g.conv(x, oc, 3, stride, pad=1, bn=True, bias=False)
    # Down-scaled last conv of the branch: residual sums stay O(1) over 8 blocks.
    y = g.conv(y, oc, 3, 1, pad=1, bn=True, bias=False, act="none", gain_scale=0.5)
    if stride != 1 or x.shape[1] != oc:
        x = g.conv(x, oc, 1, stride, pad=0, bn=True, bias=False, act="none")
    return g.act(g.binary("Add", y, x), "relu")


def build_resnet18(g: GraphBuilder, x: T, num_classes: int = 1000) -> T:
    """conv7x7/2 + max pool 3x3/2, 4 stages of 2 basic blocks, global pool, dense."""
    x = g.conv(x, 64, 7, 2, pad=3, bn=True, bias=False)
    x = g.pool(x, "max", 3, 2, pad=1)
    for i, oc in enumerate((64, 128, 256, 512)):
        x = _basic_block(g, x, oc, 1 if i == 0 else 2)
        x = _basic_block(g, x, oc, 1)
    x = g.flatten(g.global_avg_pool(x))
    return g.dense(x, num_classes, act="none")
