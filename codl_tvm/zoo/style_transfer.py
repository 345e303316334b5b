"""Fast Style Transfer (Johnson et al., ECCV'16), 480x640 as in the CoDL operator dataset.

conv9x9/32 -> conv3x3/2 64 -> conv3x3/2 128 -> 5 residual blocks (2 conv3x3 128) ->
2x upsampling to 64 and 32 channels -> conv9x9/3 -> tanh scaled to pixel range. SAME
padding (zero, not reflection). ``upsample="deconv"`` (default, as the original) uses
ConvTranspose 3x3/2; ``"resize"`` uses nearest Resize x2 + Conv 3x3, the checkerboard-free
variant that keeps every op a conv2d. ``norm="instance"`` (default, as the original) puts
InstanceNormalization after every conv but the last; ``"none"`` gives a plain conv chain.
"""

from __future__ import annotations

import numpy as np

from .layers import GraphBuilder, T


def _conv_norm(g: GraphBuilder, x: T, oc: int, k: int, s: int, norm: str, act: str) -> T:
    y = g.conv(x, oc, k, s, pad="same", act="none")
    if norm == "instance":
        scale = g.const(g.rng.uniform(0.8, 1.2, oc).astype(np.float32), "in_scale")
        bias = g.const(g.normal((oc,), 0.05), "in_bias")
        y = g.op("InstanceNormalization", [y.name, scale, bias], y.shape, epsilon=1e-5)
    elif norm != "none":
        raise ValueError(f"fast-style-transfer: norm must be 'instance' or 'none', not {norm!r}")
    return g.act(y, act)


def _upsample(g: GraphBuilder, x: T, oc: int, mode: str, norm: str) -> T:
    if mode == "resize":
        n, c, h, w = x.shape
        scales = g.const(np.array([1, 1, 2, 2], np.float32), "scales")
        x = g.op("Resize", [x.name, "", scales], (n, c, 2 * h, 2 * w), mode="nearest")
        return _conv_norm(g, x, oc, 3, 1, norm, "relu")
    if mode != "deconv":
        raise ValueError(
            f"fast-style-transfer: upsample must be 'deconv' or 'resize', not {mode!r}"
        )
    y = g.conv_transpose(x, oc, 3, 2, act="none")
    if norm == "instance":
        scale = g.const(g.rng.uniform(0.8, 1.2, oc).astype(np.float32), "in_scale")
        bias = g.const(g.normal((oc,), 0.05), "in_bias")
        y = g.op("InstanceNormalization", [y.name, scale, bias], y.shape, epsilon=1e-5)
    return g.act(y, "relu")


def build_fast_style_transfer(
    g: GraphBuilder, x: T, upsample: str = "deconv", norm: str = "instance", res_blocks: int = 5
) -> T:
    """Image transformation network; returns an (N, 3, H, W) image in [-22.5, 277.5]."""
    x = _conv_norm(g, x, 32, 9, 1, norm, "relu")
    x = _conv_norm(g, x, 64, 3, 2, norm, "relu")
    x = _conv_norm(g, x, 128, 3, 2, norm, "relu")
    for _ in range(res_blocks):
        y = _conv_norm(g, x, 128, 3, 1, norm, "relu")
        y = _conv_norm(g, y, 128, 3, 1, norm, "none")
        x = g.binary("Add", x, y)
    x = _upsample(g, x, 64, upsample, norm)
    x = _upsample(g, x, 32, upsample, norm)
    x = g.act(g.conv(x, 3, 9, pad="same", act="none", gain_scale=0.1), "tanh")
    x = g.binary("Mul", x, g.const(np.array(150.0, np.float32), "c"))
    return g.binary("Add", x, g.const(np.array(127.5, np.float32), "c"))
