"""tiny-cnn: a few conv/relu/pool layers + dense on 32x32; compiles and runs in seconds
on an unscheduled CPU (used by ``codl-tvm demo`` and the tests)."""

from __future__ import annotations

from .layers import GraphBuilder, T


def build_tiny_cnn(g: GraphBuilder, x: T, num_classes: int = 10, width: int = 8) -> T:
    """conv3x3 w -> pool -> conv3x3 2w -> conv3x3/2 2w -> avg pool -> dense."""
    x = g.conv(x, width, 3, pad=1)
    x = g.pool(x, "max", 2, 2)
    x = g.conv(x, 2 * width, 3, pad=1)
    x = g.conv(x, 2 * width, 3, 2, pad=1)
    x = g.pool(x, "avg", 2, 2)
    return g.dense(g.flatten(x), num_classes, act="none")
