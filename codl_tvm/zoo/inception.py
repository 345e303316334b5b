"""Inception-V3 (Szegedy et al., CVPR'16), torchvision layout without the auxiliary head.

299x299 input (75x75 is the smallest that fits), conv + folded BN + ReLU, 1001 classes
as TF-slim's (the CoDL dataset's dense row is 2048 -> 1001).
"""

from __future__ import annotations

from dataclasses import dataclass

from .layers import GraphBuilder, T


@dataclass(frozen=True)
class _Net:
    """The graph being built and the width multiplier of its channels."""

    g: GraphBuilder
    width: float = 1.0


def _c(n: _Net, x: T, oc: int, k: int | tuple[int, int], s: int = 1, pad="auto") -> T:
    kh, kw = (k, k) if isinstance(k, int) else k
    p = (kh // 2, kw // 2) if pad == "auto" else pad
    return n.g.conv(x, max(1, round(oc * n.width)), (kh, kw), s, pad=p, bn=True, bias=False)


def _avg_branch(n: _Net, x: T, oc: int) -> T:
    return _c(n, n.g.pool(x, "avg", 3, 1, pad=1), oc, 1)


def _block_a(n: _Net, x: T, pool_features: int) -> T:
    b1 = _c(n, x, 64, 1)
    b5 = _c(n, _c(n, x, 48, 1), 64, 5)
    b3 = _c(n, _c(n, _c(n, x, 64, 1), 96, 3), 96, 3)
    return n.g.concat([b1, b5, b3, _avg_branch(n, x, pool_features)])


def _block_b(n: _Net, x: T) -> T:
    b3 = _c(n, x, 384, 3, 2, pad=0)
    bd = _c(n, _c(n, _c(n, x, 64, 1), 96, 3), 96, 3, 2, pad=0)
    return n.g.concat([b3, bd, n.g.pool(x, "max", 3, 2)])


def _block_c(n: _Net, x: T, c7: int) -> T:
    b1 = _c(n, x, 192, 1)
    b7 = _c(n, _c(n, _c(n, x, c7, 1), c7, (1, 7)), 192, (7, 1))
    bd = _c(n, x, c7, 1)
    for oc, k in ((c7, (7, 1)), (c7, (1, 7)), (c7, (7, 1)), (192, (1, 7))):
        bd = _c(n, bd, oc, k)
    return n.g.concat([b1, b7, bd, _avg_branch(n, x, 192)])


def _block_d(n: _Net, x: T) -> T:
    b3 = _c(n, _c(n, x, 192, 1), 320, 3, 2, pad=0)
    b7 = _c(n, _c(n, _c(n, x, 192, 1), 192, (1, 7)), 192, (7, 1))
    b7 = _c(n, b7, 192, 3, 2, pad=0)
    return n.g.concat([b3, b7, n.g.pool(x, "max", 3, 2)])


def _block_e(n: _Net, x: T) -> T:
    b1 = _c(n, x, 320, 1)
    b3 = _c(n, x, 384, 1)
    b3 = n.g.concat([_c(n, b3, 384, (1, 3)), _c(n, b3, 384, (3, 1))])
    bd = _c(n, _c(n, x, 448, 1), 384, 3)
    bd = n.g.concat([_c(n, bd, 384, (1, 3)), _c(n, bd, 384, (3, 1))])
    return n.g.concat([b1, b3, bd, _avg_branch(n, x, 192)])


def build_inception_v3(g: GraphBuilder, x: T, num_classes: int = 1001, width: float = 1.0
                       ) -> T:
    """Stem, 3xA, B, 4xC, D, 2xE, global pool, dense; ``width`` scales every conv's
    channels (0.125: a 64th of the weights, for checks that carry them)."""
    n = _Net(g, width)
    x = _c(n, x, 32, 3, 2, pad=0)
    x = _c(n, x, 32, 3, pad=0)
    x = _c(n, x, 64, 3)
    x = n.g.pool(x, "max", 3, 2)
    x = _c(n, x, 80, 1)
    x = _c(n, x, 192, 3, pad=0)
    x = n.g.pool(x, "max", 3, 2)
    for pool_features in (32, 64, 64):
        x = _block_a(n, x, pool_features)
    x = _block_b(n, x)
    for c7 in (128, 160, 160, 192):
        x = _block_c(n, x, c7)
    x = _block_d(n, x)
    x = _block_e(n, _block_e(n, x))
    return g.dense(g.flatten(g.global_avg_pool(x)), num_classes, act="none")
