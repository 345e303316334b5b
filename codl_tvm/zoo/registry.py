"""The zoo's registry: one data row per model, and the checks of user arguments."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .bert import build_bert
from .inception import build_inception_v3
from .mobilenet import build_mobilenet_v1, build_mobilenet_v2
from .posenet import build_posenet
from .resnet import build_resnet18
from .rnn import build_rnn
from .style_transfer import build_fast_style_transfer
from .tiny import build_tiny_cnn
from .vgg import build_vgg16
from .yolo import build_yolo_v2

# Configuration every model accepts, besides its builder's own keyword arguments.
COMMON_CONFIG: dict[str, Any] = {"seed": 0, "fold_bn": True}

# How each kind of model reads ``input_shape`` (the shape of one sample, batch excluded).
SHAPE_MEANING = {
    "image": "(H, W) or (C, H, W) of the NCHW float32 input",
    "sequence": "(seq_len, input_size) of the (N, T, input_size) float32 input",
    "tokens": "(seq_len,) of the (N, S) int64 input_ids / attention_mask",
}


@dataclass(frozen=True)
class ModelSpec:
    """One zoo model: how to build it and what it is."""

    builder: Callable[..., Any]
    kind: str  # key of SHAPE_MEANING
    default_shape: tuple[int, ...]
    paper: str
    fixed: dict[str, Any] = field(default_factory=dict)  # builder kwargs users cannot change
    min_hw: int = 1  # smallest H and W the architecture fits (image models)
    hw_multiple: int = 1  # H and W must be multiples of this (image models)

    def config_defaults(self) -> dict[str, Any]:
        params = inspect.signature(self.builder).parameters.values()
        own = {
            p.name: p.default
            for p in params
            if p.default is not inspect.Parameter.empty and p.name not in self.fixed
        }
        return {**COMMON_CONFIG, **own}

    @property
    def notes(self) -> str:
        return inspect.getdoc(inspect.getmodule(self.builder)) or ""


CODL = "CoDL (Jia et al., MobiSys'22)"
EOP = "EOP (VEE'22)"
MULAYER = "muLayer (Kim et al., EuroSys'19)"

MODELS: dict[str, ModelSpec] = {
    "yolo-v2": ModelSpec(build_yolo_v2, "image", (3, 416, 416), CODL, hw_multiple=32),
    "vgg-16": ModelSpec(build_vgg16, "image", (3, 224, 224), f"{CODL}; {MULAYER}", min_hw=32),
    "posenet": ModelSpec(build_posenet, "image", (3, 256, 256), CODL, hw_multiple=8),
    "fast-style-transfer": ModelSpec(
        build_fast_style_transfer, "image", (3, 480, 640), CODL, hw_multiple=4
    ),
    "resnet-18": ModelSpec(build_resnet18, "image", (3, 224, 224), f"{EOP}; {MULAYER}", min_hw=32),
    "mobilenet-v1": ModelSpec(
        build_mobilenet_v1, "image", (3, 224, 224), f"{EOP}; {MULAYER}", min_hw=32
    ),
    "mobilenet-v2": ModelSpec(
        build_mobilenet_v2, "image", (3, 224, 224), f"{EOP}; {MULAYER}", min_hw=32
    ),
    "inception-v3": ModelSpec(
        build_inception_v3, "image", (3, 299, 299), f"{EOP}; {MULAYER}", min_hw=75
    ),
    "lstm": ModelSpec(build_rnn, "sequence", (1, 80), EOP, fixed={"cell": "lstm"}),
    "gru": ModelSpec(build_rnn, "sequence", (1, 80), EOP, fixed={"cell": "gru"}),
    "bert-base": ModelSpec(build_bert, "tokens", (128,), EOP),
    "tiny-cnn": ModelSpec(
        build_tiny_cnn, "image", (3, 32, 32), "codl-tvm demo model", min_hw=8, hw_multiple=8
    ),
}


def spec_of(name: str) -> ModelSpec:
    """The registry row of ``name``; ValueError listing the known models otherwise."""
    if name not in MODELS:
        raise ValueError(f"unknown zoo model {name!r}; known models: {', '.join(MODELS)}")
    return MODELS[name]


def resolve_config(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """Defaults overlaid with ``config``; ValueError naming any key the model does not take."""
    defaults = spec_of(name).config_defaults()
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise ValueError(
            f"{name}: unknown config {', '.join(unknown)}; accepted: {', '.join(defaults)}"
        )
    return {**defaults, **config}


def resolve_shape(name: str, input_shape: tuple[int, ...] | list[int] | int | None) -> tuple:
    """Normalise a per-sample input shape override and check that the model fits it."""
    spec = spec_of(name)
    if input_shape is None:
        return spec.default_shape
    shape = (input_shape,) if isinstance(input_shape, int) else tuple(int(d) for d in input_shape)
    if spec.kind == "image" and len(shape) == 2:
        shape = (spec.default_shape[0], *shape)
    if len(shape) != len(spec.default_shape) or min(shape) < 1:
        raise ValueError(
            f"{name}: bad input_shape {input_shape!r}; expected {SHAPE_MEANING[spec.kind]}"
        )
    if spec.kind == "image":
        c, h, w = shape
        if c != spec.default_shape[0]:
            raise ValueError(f"{name}: takes {spec.default_shape[0]} input channels, not {c}")
        if (
            min(h, w) < max(spec.min_hw, spec.hw_multiple)
            or h % spec.hw_multiple
            or (w % spec.hw_multiple)
        ):
            raise ValueError(
                f"{name}: input {h}x{w} unsupported; H and W must be >= "
                f"{max(spec.min_hw, spec.hw_multiple)} and multiples of {spec.hw_multiple}"
            )
    return shape


def check_batch(batch: int) -> int:
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"batch must be a positive int, not {batch!r}")
    return batch
