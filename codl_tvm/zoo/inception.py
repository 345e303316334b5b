"""Inception-V3 (Szegedy et al., CVPR'16), torchvision layout without the auxiliary head.

299x299 input (75x75 is the smallest that fits), conv + folded BN + ReLU, 1001 classes
as TF-slim's (the CoDL dataset's dense row is 2048 -> 1001).
"""

from __future__ import annotations

from .layers import GraphBuilder, T


def _c(g: GraphBuilder, x: T, oc: int, k: int | tuple[int, int], s: int = 1, pad="auto") -> T:
    kh, kw = (k, k) if isinstance(k, int) else k
    p = (kh // 2, kw // 2) if pad == "auto" else pad
    return g.conv(x, oc, (kh, kw), s, pad=p, bn=True, bias=False)


def _avg_branch(g: GraphBuilder, x: T, oc: int) -> T:
    return _c(g, g.pool(x, "avg", 3, 1, pad=1), oc, 1)


def _block_a(g: GraphBuilder, x: T, pool_features: int) -> T:
    b1 = _c(g, x, 64, 1)
    b5 = _c(g, _c(g, x, 48, 1), 64, 5)
    b3 = _c(g, _c(g, _c(g, x, 64, 1), 96, 3), 96, 3)
    return g.concat([b1, b5, b3, _avg_branch(g, x, pool_features)])


def _block_b(g: GraphBuilder, x: T) -> T:
    b3 = _c(g, x, 384, 3, 2, pad=0)
    bd = _c(g, _c(g, _c(g, x, 64, 1), 96, 3), 96, 3, 2, pad=0)
    return g.concat([b3, bd, g.pool(x, "max", 3, 2)])


def _block_c(g: GraphBuilder, x: T, c7: int) -> T:
    b1 = _c(g, x, 192, 1)
    b7 = _c(g, _c(g, _c(g, x, c7, 1), c7, (1, 7)), 192, (7, 1))
    bd = _c(g, x, c7, 1)
    for oc, k in ((c7, (7, 1)), (c7, (1, 7)), (c7, (7, 1)), (192, (1, 7))):
        bd = _c(g, bd, oc, k)
    return g.concat([b1, b7, bd, _avg_branch(g, x, 192)])


def _block_d(g: GraphBuilder, x: T) -> T:
    b3 = _c(g, _c(g, x, 192, 1), 320, 3, 2, pad=0)
    b7 = _c(g, _c(g, _c(g, x, 192, 1), 192, (1, 7)), 192, (7, 1))
    b7 = _c(g, b7, 192, 3, 2, pad=0)
    return g.concat([b3, b7, g.pool(x, "max", 3, 2)])


def _block_e(g: GraphBuilder, x: T) -> T:
    b1 = _c(g, x, 320, 1)
    b3 = _c(g, x, 384, 1)
    b3 = g.concat([_c(g, b3, 384, (1, 3)), _c(g, b3, 384, (3, 1))])
    bd = _c(g, _c(g, x, 448, 1), 384, 3)
    bd = g.concat([_c(g, bd, 384, (1, 3)), _c(g, bd, 384, (3, 1))])
    return g.concat([b1, b3, bd, _avg_branch(g, x, 192)])


def build_inception_v3(g: GraphBuilder, x: T, num_classes: int = 1001) -> T:
    """Stem, 3xA, B, 4xC, D, 2xE, global pool, dense."""
    x = _c(g, x, 32, 3, 2, pad=0)
    x = _c(g, x, 32, 3, pad=0)
    x = _c(g, x, 64, 3)
    x = g.pool(x, "max", 3, 2)
    x = _c(g, x, 80, 1)
    x = _c(g, x, 192, 3, pad=0)
    x = g.pool(x, "max", 3, 2)
    for pool_features in (32, 64, 64):
        x = _block_a(g, x, pool_features)
    x = _block_b(g, x)
    for c7 in (128, 160, 160, 192):
        x = _block_c(g, x, c7)
    x = _block_d(g, x)
    x = _block_e(g, _block_e(g, x))
    return g.dense(g.flatten(g.global_avg_pool(x)), num_classes, act="none")
