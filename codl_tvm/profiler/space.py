"""What to measure: jobs from CoDL's sampling ranges, from workload files, and sharing costs."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from codl_tvm.predictor.opspec import (
    BYTES_PER_ELEM,
    SPLIT_DIMS,
    OpSpec,
    conv_kind,
    same_padding,
)
from codl_tvm.profiler.schema import row_key, target_json

# CoDL section 6: HW (1, 640), IC (3, 4096), OC (32, 4096), F (1, 7), S (1, 2)
CODL_RANGES: dict[str, tuple[int, int]] = {
    "HW": (1, 640),
    "IC": (3, 4096),
    "OC": (32, 4096),
    "K": (1, 7),
    "S": (1, 2),
}
KIND_WEIGHTS: dict[str, float] = {
    "conv2d": 0.5,
    "depthwise": 0.12,
    "dense": 0.1,
    "pool_max": 0.1,
    "pool_avg": 0.08,
    "elementwise": 0.1,
}
# Real networks' channel counts are mostly multiples of 32 or 8 and their kernels 1 or 3
# wide. CoDL's log-uniform draw almost never gives such a count, and the dispatch picks
# kernels by them (a 1x1 conv whose OC fills the NCHWc block runs the direct kernel, not the
# GEMM), so a whole kernel once had no random samples: (probability, rounding multiple).
CHANNEL_MULTIPLES: tuple[tuple[float, int], ...] = ((0.5, 32), (0.25, 8), (0.25, 1))
KERNEL_WEIGHTS: dict[int, float] = {1: 0.3, 2: 0.05, 3: 0.4, 4: 0.03, 5: 0.1, 6: 0.02, 7: 0.1}
FULL_GRID: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(1, 11))
QUICK_GRID: tuple[float, ...] = (0.3, 0.6, 1.0)
DEFAULT_GRID: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)


@dataclass(frozen=True)
class Job:
    """One kernel to measure on one processor.

    Compute jobs run ``spec.part(role, dim, ratio)``; sharing jobs (``op`` in to_cpu, to_gpu,
    slice, concat, sync) move or copy a ``(1, C, H, W)`` float32 tensor, ``shape = (C, H, W)``.
    """

    role: str
    op: str
    spec: OpSpec | None = None
    dim: str = "-"
    ratio: float = 1.0
    shape: tuple[int, int, int] = (1, 1, 1)
    model: str = "random"

    @property
    def sub(self) -> OpSpec:
        assert self.spec is not None
        sub = self.spec.part(self.role, self.dim, self.ratio)
        if sub is None:
            raise ValueError(f"{self}: empty part")
        return sub

    @property
    def share(self) -> float:
        """The fraction of the op this processor runs."""
        return self.ratio if self.role == "gpu" else 1.0 - self.ratio

    @property
    def flops(self) -> int:
        return self.sub.flops if self.spec is not None else math.prod(self.shape)

    def row(self, pair_name: str, target: dict[str, Any]) -> dict[str, Any]:
        """The CSV row of this job, without the measured and blocking columns."""
        if self.spec is None:
            c, h, w = self.shape
            full = sub = OpSpec("elementwise", h, w, c, c)
            nbytes = c * h * w * BYTES_PER_ELEM
        else:
            full, sub = self.spec, self.sub
            nbytes = sub.out_bytes
        return {
            "pair": pair_name, "role": self.role, "target": target_json(target), "op": self.op,
            "H": full.H, "W": full.W, "IC": full.IC, "OC": full.OC, "KH": full.KH, "KW": full.KW,
            "SH": full.SH, "SW": full.SW, "padding": ":".join(map(str, full.pad)),
            "dilation": full.dilation, "groups": full.groups, "dim": self.dim,
            "ratio": round(self.ratio, 4), "sub_H": sub.H, "sub_W": sub.W, "sub_IC": sub.IC,
            "sub_OC": sub.OC, "sub_pad_top": sub.pad[0], "sub_pad_bottom": sub.pad[2],
            "sub_out": sub.out_elems, "bytes": nbytes, "model": self.model,
        }  # fmt: skip

    def key(self, pair_name: str) -> tuple[str, ...]:
        return row_key(self.row(pair_name, {}))


def _log_uniform(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _channels(rng: np.random.Generator, lo: int, hi: int) -> int:
    """A log-uniform count in [lo, hi], rounded as :data:`CHANNEL_MULTIPLES` says."""
    c = _log_uniform(rng, lo, hi)
    probs = [p for p, _ in CHANNEL_MULTIPLES]
    mult = CHANNEL_MULTIPLES[int(rng.choice(len(probs), p=probs))][1]
    if c < mult:
        return c
    return int(min(hi - hi % mult, max(mult, round(c / mult) * mult)))


def random_spec(rng: np.random.Generator, kind: str) -> OpSpec:
    """One op of ``kind``: sizes log-uniform in CoDL's ranges, channels and kernels as in CNNs."""
    hw = _log_uniform(rng, *CODL_RANGES["HW"])
    ic = _channels(rng, *CODL_RANGES["IC"])
    oc = _channels(rng, *CODL_RANGES["OC"])
    sizes = list(KERNEL_WEIGHTS)
    weights = np.array([KERNEL_WEIGHTS[k] for k in sizes])
    k = int(sizes[int(rng.choice(len(sizes), p=weights / weights.sum()))])
    s = int(rng.integers(1, 3))
    if kind == "dense":
        return OpSpec("dense", 1, 1, ic, oc)
    if kind == "elementwise":
        return OpSpec("elementwise", hw, hw, ic, ic)
    k = min(k, hw)
    if kind in ("pool_max", "pool_avg"):
        k = min(int(rng.choice([2, 3])), hw)
        return OpSpec(kind, hw, hw, ic, ic, k, k, s if k > 1 else 1, s if k > 1 else 1)
    p = k // 2
    if kind == "depthwise":
        return OpSpec("depthwise", hw, hw, ic, ic, k, k, s, s, (p, p, p, p), groups=ic)
    return OpSpec("conv2d", hw, hw, ic, oc, k, k, s, s, (p, p, p, p))


def sample_specs(
    n: int,
    seed: int = 0,
    max_flops: float = 5e7,
    kinds: Sequence[str] | None = None,
    min_flops: float = 0.0,
    max_bytes: float = math.inf,
) -> list[OpSpec]:
    """``n`` random ops in CoDL's ranges with ``min_flops`` to ``max_flops`` FLOPs each, and
    inputs and outputs of at most ``max_bytes`` each."""
    rng = np.random.default_rng(seed)
    names = list(kinds or KIND_WEIGHTS)
    unknown = sorted(set(names) - set(KIND_WEIGHTS))
    if unknown:
        raise ValueError(f"unknown op kinds {unknown}: choose from {sorted(KIND_WEIGHTS)}")
    weights = np.array([KIND_WEIGHTS[k] for k in names])
    specs: list[OpSpec] = []
    for _ in range(200 * n):
        if len(specs) >= n:
            break
        kind = str(rng.choice(names, p=weights / weights.sum()))
        try:
            spec = random_spec(rng, kind)
        except ValueError:
            continue
        if min_flops <= spec.flops <= max_flops and max(spec.in_bytes, spec.out_bytes) <= max_bytes:
            specs.append(spec)
    return specs


# CNN tail layers: few pixels, many channels, weights of 1-256 MB. CoDL's log-uniform draw
# under the FLOPs caps above almost never gives one (a 13x13 1024->1024 3x3 conv is 3.5 GFLOPs),
# yet their weights past the cores' L2s and the LLC are a regime of their own (the CPU
# Winograd's transformed weight, the 1x1 GEMM's weight pack): without them a held-out
# network's deepest layers were extrapolated.
DEEP_RANGES: dict[str, tuple[int, int]] = {"HW": (2, 40), "C": (256, 4096)}
DEEP_MAX_FLOPS = 5e9
# CNN body layers: 28-416 pixels a side, 16-512 channels, 0.1-4 GFLOPs (VGG-16's, YOLO-V2's
# and PoseNet's convs but their tails). The draw's FLOPs cap (1e9) leaves few: the
# training file's body-size rows are the CNNs' own, so a held-out CNN's body layers were only
# checked against other CNNs (and, on the H100 host, random direct 1x1 planes stayed under
# the 32 KB where YOLO-V2's 1x1 layers run slower per FMA).
BODY_RANGES: dict[str, tuple[int, int]] = {"HW": (28, 416), "IC": (16, 512), "OC": (32, 512)}
BODY_FLOPS: tuple[float, float] = (1e8, 4e9)


@dataclass(frozen=True)
class Stratum:
    """A random draw of convs from one region of CoDL's space: HW, IC and OC log-uniform in
    their ranges (channels rounded as :data:`CHANNEL_MULTIPLES`), kernels and strides as in
    :func:`random_spec` unless fixed (``kernel``, ``stride``: 0 is drawn), FLOPs within
    ``flops``; rows of model ``model``; ``about`` says what they are (the CLI's help)."""

    model: str
    hw: tuple[int, int]
    ic: tuple[int, int]
    oc: tuple[int, int]
    flops: tuple[float, float]
    about: str
    kernel: int = 0
    stride: int = 0
    pools: bool = False  # draw pools of :data:`POOL_WINDOWS` instead of convs (OC = IC)


# CNN pools the CoDL draw never gives (its pools are 2x2 or 3x3 without padding): (weight,
# kind, window, stride, pad), window 0 = the whole input (a global pool). ResNet, Inception
# and MobileNet pad their 3x3 pools and end in a global average pool; ResNet-18's padded
# 3x3/2 max pool ran 2.2x the CPU prediction and the GPU's global pools run a kernel of their
# own (DLight Reduction) that no sample had (``benchmarks/results/resnet-h100``)
POOL_WINDOWS: tuple[tuple[float, str, int, int, int], ...] = (
    (0.25, "pool_max", 3, 2, 1),
    (0.10, "pool_avg", 3, 2, 1),
    (0.10, "pool_max", 3, 1, 1),
    (0.15, "pool_avg", 3, 1, 1),
    (0.30, "pool_avg", 0, 1, 0),
    (0.10, "pool_max", 0, 1, 0),
)

# name -> stratum; each is a ``--NAME N`` option of ``codl-tvm profile`` / ``profile-bundle``
STRATA: dict[str, Stratum] = {
    "deep": Stratum("random-deep", DEEP_RANGES["HW"], DEEP_RANGES["C"], DEEP_RANGES["C"],
                    (0.0, DEEP_MAX_FLOPS), "CNN tail layers (few pixels, 256-4096 channels)"),
    "body": Stratum("random-body", BODY_RANGES["HW"], BODY_RANGES["IC"], BODY_RANGES["OC"],
                    BODY_FLOPS, "CNN body layers (28-416 pixels, 16-512 channels, 0.1-4 GFLOPs)"),
    # the body layers' stride-1 1x1 convs alone: the body draw gives few (1x1 at stride 1 is
    # ~15% of it), and the direct 1x1 kernel's plane step needs them on both sides
    "pointwise": Stratum("random-pointwise", (28, 208), BODY_RANGES["IC"], BODY_RANGES["OC"],
                         (1e7, BODY_FLOPS[1]), "stride-1 1x1 convs of the body layers",
                         kernel=1, stride=1),
    # ResNets' downsampling shortcuts: 1x1 at stride 2, 7-224 pixels, 32-2048 channels. The
    # training draw has none, and the direct kernel the CPU runs them with was
    # 14-24% within +-10% on the strata's 236 such rows (0.63-0.67x on the deep ones, 1.13x
    # on the body ones)
    "downsample": Stratum("random-downsample", (7, 224), (32, 2048), (64, 2048),
                          (1e6, BODY_FLOPS[1]), "stride-2 1x1 convs (ResNet shortcuts)",
                          kernel=1, stride=2),
    # padded 3x3 pools over 7-224 pixels and global pools over 4-32, 16-2048 channels
    "pools": Stratum("random-pool", (4, 224), (16, 2048), (16, 2048), (0.0, 1e9),
                     "padded 3x3 and global pools (ResNet, Inception, MobileNet)", pools=True),
}


def _pool_spec(rng: np.random.Generator, st: Stratum) -> OpSpec:
    """One pool of :data:`POOL_WINDOWS`: a global one over 4-32 pixels, else over ``st.hw``."""
    weights = np.array([w for w, *_ in POOL_WINDOWS])
    _, kind, k, stride, pad = POOL_WINDOWS[int(rng.choice(len(POOL_WINDOWS),
                                                          p=weights / weights.sum()))]
    c = _channels(rng, *st.ic)
    if k == 0:
        hw = _log_uniform(rng, max(st.hw[0], 4), min(st.hw[1], 32))
        return OpSpec(kind, hw, hw, c, c, hw, hw, 1, 1)
    hw = _log_uniform(rng, max(st.hw[0], 7), st.hw[1])
    return OpSpec(kind, hw, hw, c, c, k, k, stride, stride, (pad,) * 4)


def stratum_specs(name: str, n: int, seed: int = 0) -> list[OpSpec]:
    """``n`` random convs of the stratum ``STRATA[name]``, the same for the same seed."""
    st = STRATA[name]
    rng = np.random.default_rng(seed)
    sizes = list(KERNEL_WEIGHTS)
    weights = np.array([KERNEL_WEIGHTS[k] for k in sizes])
    specs: list[OpSpec] = []
    for _ in range(200 * n):
        if len(specs) >= n:
            break
        if st.pools:
            spec = _pool_spec(rng, st)
            if st.flops[0] <= spec.flops <= st.flops[1]:
                specs.append(spec)
            continue
        hw = _log_uniform(rng, *st.hw)
        ic, oc = _channels(rng, *st.ic), _channels(rng, *st.oc)
        k = st.kernel or min(int(sizes[int(rng.choice(len(sizes), p=weights / weights.sum()))]),
                             hw)
        s = st.stride or int(rng.integers(1, 3))
        spec = OpSpec("conv2d", hw, hw, ic, oc, k, k, s, s, (k // 2,) * 4)
        if st.flops[0] <= spec.flops <= st.flops[1]:
            specs.append(spec)
    return specs


def strata_specs(counts: Mapping[str, int], seed: int = 0) -> list[tuple[str, OpSpec]]:
    """(model, conv) of ``counts[name]`` random convs of each named stratum, in the order of
    :data:`STRATA`; an unknown name or a negative count is a ``ValueError``."""
    unknown = sorted(set(counts) - set(STRATA))
    if unknown:
        raise ValueError(f"unknown strata {unknown}: choose from {list(STRATA)}")
    bad = {name: n for name, n in counts.items() if n < 0}
    if bad:
        raise ValueError(f"negative stratum counts {bad}: a count of convs is 0 or more")
    return [(st.model, s) for name, st in STRATA.items()
            for s in stratum_specs(name, counts.get(name, 0), seed)]


def deep_specs(n: int, seed: int = 0) -> list[OpSpec]:
    """``n`` random convs of the deep-layer stratum (:data:`DEEP_RANGES`)."""
    return stratum_specs("deep", n, seed)


def body_specs(n: int, seed: int = 0) -> list[OpSpec]:
    """``n`` random convs of the body-layer stratum (:data:`BODY_RANGES`)."""
    return stratum_specs("body", n, seed)


def _int(row: dict[str, str], col: str, default: int = 0) -> int:
    return int(float(row[col])) if row.get(col, "") not in ("", None) else default


def workload_specs(path: str | Path) -> list[tuple[str, OpSpec]]:
    """(CNN name, op) for each row of a workload CSV (conv2d.csv, pool2d.csv or dense.csv)."""
    path = Path(path)
    out: list[tuple[str, OpSpec]] = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        cols = set(reader.fieldnames or [])
        for need in ("CNN", "IH", "IW", "IC", "OC", "KH", "KW"):
            if need not in cols:
                raise ValueError(f"{path}: not a workload file, column {need!r} is missing")
        for lineno, row in enumerate(reader, start=2):
            try:
                out.append((row["CNN"], _workload_spec(row, cols)))
            except (ValueError, KeyError) as err:
                raise ValueError(f"{path}:{lineno}: {err}") from None
    return out


def _workload_spec(row: dict[str, str], cols: set[str]) -> OpSpec:
    ih, iw, ic, oc = (_int(row, c) for c in ("IH", "IW", "IC", "OC"))
    kh, kw = _int(row, "KH", 1), _int(row, "KW", 1)
    if "SH" not in cols:  # dense.csv: flatten then dense
        return OpSpec("dense", 1, 1, ih * iw * ic, oc)
    sh, sw = _int(row, "SH", 1), _int(row, "SW", 1)
    dh, dw = _int(row, "DH", 1) or 1, _int(row, "DW", 1) or 1
    if dh != dw:
        raise ValueError(f"dilation {dh}x{dw}: only equal dilations are supported")
    same = _int(row, "PT", _int(row, "PAT", 0)) == 1
    ph, pw = _int(row, "PH"), _int(row, "PW")
    pt, pb = same_padding(ih, kh, sh, dh) if same else (0, 0)
    pl, pr = same_padding(iw, kw, sw, dh) if same else (0, 0)
    # PH / PW are the total explicit padding of an axis (MACE convention), split evenly
    pad = (pt + ph // 2, pl + pw // 2, pb + ph - ph // 2, pr + pw - pw // 2)
    if "POT" in cols:
        kind = "pool_max" if _int(row, "POT") == 2 else "pool_avg"
        return OpSpec(kind, ih, iw, ic, ic, kh, kw, sh, sw, pad, dh)
    return OpSpec(conv_kind(ic, oc, 1), ih, iw, ic, oc, kh, kw, sh, sw, pad, dh)


def compute_jobs(
    specs: Iterable[OpSpec | tuple[str, OpSpec]],
    grid: Sequence[float] = FULL_GRID,
    roles: Sequence[str] = ("gpu", "cpu"),
) -> list[Job]:
    """Each processor runs its share ``s`` of the grid on each dim (plan ratio ``s`` / ``1-s``)."""
    jobs: dict[tuple, Job] = {}
    for item in specs:
        model, spec = item if isinstance(item, tuple) else ("random", item)
        for dim in SPLIT_DIMS[spec.kind]:
            for share in grid:
                for role in roles:
                    ratio = round(share if role == "gpu" else 1.0 - share, 4)
                    job = Job(role, spec.kind, spec, dim, ratio, model=model)
                    if spec.part(role, dim, ratio) is not None:
                        jobs.setdefault(job.key(""), job)
    return list(jobs.values())


def for_pair(jobs: Sequence[Job], runs_block_copies: bool) -> list[Job]:
    """``jobs`` a pair can run: ``copy_gpu`` only where its GPU runs block copies (CUDA, or a
    CPU in the ``cpu-pair``; :func:`codl_tvm.streams.copy_block`)."""
    return [j for j in jobs if j.op != "copy_gpu" or runs_block_copies]


def sharing_jobs(n_sizes: int = 8, max_bytes: int = 64 << 20) -> list[Job]:
    """to_vdevice both ways, slice and concat on each side, a block of rows copied within the
    GPU (``copy_gpu``) over sizes, and the sync probe."""
    jobs = [Job("cpu", "sync", shape=(1, 1, 1), model="sharing")]
    for nbytes in np.geomspace(4096, max_bytes, n_sizes):
        c = 32
        hw = max(1, int(math.sqrt(nbytes / BYTES_PER_ELEM / c)))
        shape = (c, hw, hw)
        jobs.append(Job("cpu", "to_cpu", shape=shape, model="sharing"))
        jobs.append(Job("gpu", "to_gpu", shape=shape, model="sharing"))
        jobs.append(Job("gpu", "copy_gpu", shape=shape, model="sharing"))
        for role in ("gpu", "cpu"):
            jobs.append(Job(role, "slice", shape=shape, model="sharing"))
            jobs.append(Job(role, "concat", shape=shape, model="sharing"))
    return jobs
