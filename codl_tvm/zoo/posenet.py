"""PoseNet of the CoDL paper: Convolutional Pose Machines (Wei et al., CVPR'16).

Shapes as in the CoDL operator dataset (``workloads/conv2d.csv``): a VGG-19 front end
(10 convs, 3 pools) at 256x256, CPM feature convs to 128 channels at 32x32, a 1x1 stage
producing 21 belief maps, then refinement stages that concatenate features and beliefs
(128 + 21 = 149 channels) and apply five 7x7 convs and two 1x1 convs. All convs ReLU
except each stage's last. Output: the last stage's (N, 21, H/8, W/8) belief maps.
"""

from __future__ import annotations

from .layers import GraphBuilder, T

FRONT = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 256, 256, 256, 256, 128]


def _stage(g: GraphBuilder, x: T, layers: list[tuple[int, int]], n_maps: int) -> T:
    for oc, k in layers:
        x = g.conv(x, oc, k)
    return g.conv(x, n_maps, 1, act="none")


def build_posenet(g: GraphBuilder, x: T, num_maps: int = 21, refine_stages: int = 2) -> T:
    """CPM with one initial stage and ``refine_stages`` refinement stages."""
    for layer in FRONT:
        x = g.pool(x, "max", 2, 2) if layer == "M" else g.conv(x, layer, 3)
    feats = x
    beliefs = _stage(g, feats, [(512, 1)], num_maps)
    refine = [(128, 7)] * 5 + [(128, 1)]
    for _ in range(refine_stages):
        beliefs = _stage(g, g.concat([feats, beliefs]), refine, num_maps)
    return beliefs
