"""VGG-16 (Simonyan & Zisserman, ICLR'15), 224x224, 1000 classes, no batch norm."""

from __future__ import annotations

from .layers import GraphBuilder, T

VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def build_vgg16(g: GraphBuilder, x: T, num_classes: int = 1000) -> T:
    """13 conv3x3(pad 1)+ReLU, 5 max pools, then 3 dense layers (dropout is inference-free)."""
    for layer in VGG16:
        x = g.pool(x, "max", 2, 2) if layer == "M" else g.conv(x, layer, 3, pad=1)
    x = g.flatten(x)
    x = g.dense(x, 4096)
    x = g.dense(x, 4096)
    return g.dense(x, num_classes, act="none")
