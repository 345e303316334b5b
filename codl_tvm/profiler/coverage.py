"""Coverage by construction: every kernel model the pair's dispatch can run gets samples.

A random draw in CoDL's ranges leaves whole kernels without a sample where their predicate is
narrow (a quick profile drew no Winograd sub-op, yet the dispatch runs Winograd on many real
convs). :func:`cover` therefore counts the profile's compute jobs per predictor model (role,
kernel kind, algorithm, filter-size variant: ``predictor.codl``'s keys), with the kernel the
dispatch mirror picks on the pair's CPU and GPU, and tops every model the pair can run up to
:data:`MIN_PER_MODEL` jobs, and further in proportion to how often real networks run it
(:data:`USAGE_DIR`: the layer shapes of the CoDL authors' operator dataset, 101 layers of
real CNNs), from a pool of cheap random ops.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from codl_tvm.predictor.blocking import BY_FILTER, kernel_kind, model_algorithm, variant
from codl_tvm.predictor.machine import Machine, reference
from codl_tvm.predictor.mirror import kernel
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.profiler.space import (
    KIND_WEIGHTS,
    Job,
    compute_jobs,
    sample_specs,
    workload_specs,
)
from codl_tvm.tiling import GLOBAL_POOL_MIN_WINDOW

MIN_PER_MODEL = 12  # above accuracy.MIN_KERNEL_SAMPLES: a model's fit has slack for outliers
# a model's jobs come from at least this many distinct ops: a kernel model has up to 13 terms,
# and the jobs of one op (its shares and dims) move them together. A quick profile once fitted
# the CPU's 1x1 GEMM on 4 ops and its stride-2 1x1 direct conv on 3: the GEMM's FMA unit came
# out 0 and blind 1x1 convs ran 0.59x their price (benchmarks/PORTABILITY.md)
MIN_OPS_PER_MODEL = 12
USAGE_SHARE = 0.25  # of the profile's compute jobs a model may claim by its share of real use
POOL_DRAWS = 3000  # random ops per kind in the pool the top-ups come from
POOL_FLOPS_FACTOR = 10.0  # the pool's ops may be this much larger than the draw's
SPREAD_PICKS = 256  # top-ups spread over a kernel's sizes; more than any profile takes
USAGE_DIR = Path(__file__).resolve().parent.parent / "data" / "workloads"


def pair_machine(pair: Any) -> Machine:
    """What the dispatch's choice depends on for ``pair``: the CPU target's cores and SIMD
    lanes, the GPU's SMs and the kernel variants in use (the rest: the reference's, which
    the kernel choice does not read)."""
    import tvm

    from codl_tvm import tiling
    from codl_tvm.schedules.target_info import target_info

    cpu = target_info(tvm.target.Target(pair.cpu_spec))
    gpu = pair.gpu_spec
    sms = pair.gpu_sms or (tiling.sm_count(str(gpu.get("arch", "")), str(gpu["kind"]))
                           if gpu["kind"] != "llvm" else reference().sms)  # fmt: skip
    return dataclasses.replace(reference(), cores=cpu.cores, lanes=cpu.lanes, sms=sms,
                               variants=tiling.current_variants())  # fmt: skip


def model_key(job: Job, families: dict[str, str], m: Machine) -> str | None:
    """The kernel that runs ``job`` as the predictor's models tell kernels apart (role, kind,
    algorithm, filter-size variant), and split-K apart from the tiled kernel whose model
    prices it: the report scores them apart (None: a sharing job or an empty part)."""
    if job.spec is None:
        return None
    sub = job.spec.part(job.role, job.dim, job.ratio)
    if sub is None:
        return None
    algo = kernel(families[job.role], sub, m).algorithm
    key = f"{job.role}/{kernel_kind(sub)}/{algo}"
    return f"{key}/{variant(sub)}" if model_algorithm(algo) in BY_FILTER else key


def cover(jobs: Sequence[Job], pair: Any, grid: Sequence[float], max_flops: float,
          min_flops: float, seed: int = 0, min_per_model: int = MIN_PER_MODEL,
          m: Machine | None = None, min_ops_per_model: int = MIN_OPS_PER_MODEL,
          max_bytes: float = math.inf) -> list[Job]:
    """``jobs`` and the top-up jobs that give every model the pair can run its share.

    Parameters
    ----------
    jobs : sequence of Job
        The profile's jobs (sharing jobs pass through).
    pair : DevicePair
        Whose dispatch picks the kernels.
    grid : sequence of float
        The shares the profile measures of each drawn op.
    max_flops, min_flops : float
        The FLOPs bounds of the drawn ops (the profile's own).
    min_per_model : int
        The fewest jobs any model gets.
    m : Machine, optional
        The pair's machine (default :func:`pair_machine`).
    min_ops_per_model : int
        The fewest distinct ops any model's jobs come from.
    max_bytes : float
        The largest input or output of a top-up op (:func:`usage_max_bytes`).
    """
    m = m or pair_machine(pair)
    families = {"cpu": "cpu" if pair.cpu_spec["kind"] == "llvm" else "gpu",
                "gpu": "cpu" if pair.gpu_spec["kind"] == "llvm" else "gpu"}  # fmt: skip
    have: Counter[str | None] = Counter()
    ops: dict[str | None, set[OpSpec]] = defaultdict(set)  # the distinct ops of each model
    for j in jobs:
        key = model_key(j, families, m)
        have[key] += 1
        ops[key].add(j.spec)
    n_compute = sum(n for k, n in have.items() if k is not None)
    # up to 10x the draw's FLOPs: some kernels run only larger ops (split-K: few pixels, a long
    # reduction); within the draw's bounds a kernel's ops are spread over its sizes
    pool = {key: spread(found, max_flops)
            for key, found in _pool(grid, POOL_FLOPS_FACTOR * max_flops, min_flops, seed,
                                    families, m, max_bytes).items()}  # fmt: skip
    usage = usage_shares(families, m, grid)
    keys = dict.fromkeys([*sorted(pool), *sorted(usage)])
    added: list[Job] = []
    seen = {j.key("") for j in jobs}
    for key in keys:
        want = max(min_per_model, math.ceil(usage.get(key, 0.0) * USAGE_SHARE * n_compute))
        for job in pool.get(key, ()):
            if have[key] >= want and len(ops[key]) >= min_ops_per_model:
                break
            if have[key] >= want and job.spec in ops[key]:
                continue  # enough jobs; only another op adds what the fit lacks
            if job.key("") not in seen:
                seen.add(job.key(""))
                added.append(job)
                have[key] += 1
                ops[key].add(job.spec)
    return [*jobs, *added]


def spread(jobs: Sequence[Job], max_flops: float) -> list[Job]:
    """``jobs`` (cheapest first) reordered so that any first few span their sizes.

    A kernel's top-ups once came cheapest first: a quick profile's 1x1 GEMM samples had a
    median of 0.26 MFLOPs and its Winograd samples 2 MFLOPs, while real layers have 10-1000,
    and a fit on the smallest ops priced real layers 1.3-1.7x too long. Here the jobs within
    ``max_flops`` come in the order of evenly spaced points of their log-FLOPs range (van der
    Corput: the middle, the quarters, the eighths, ...), each taking the nearest job not yet
    taken; jobs above ``max_flops`` follow, cheapest first.
    """
    inside = sorted((j for j in jobs if j.flops <= max_flops), key=lambda j: j.flops)
    beyond = sorted((j for j in jobs if j.flops > max_flops), key=lambda j: j.flops)
    if len(inside) < 3:
        return [*inside, *beyond]
    logs = [math.log(max(j.flops, 1)) for j in inside]
    lo, hi = logs[0], logs[-1]
    order: list[int] = [0, len(inside) - 1]  # the range's ends first
    taken = set(order)
    for i in range(1, SPREAD_PICKS):
        if len(order) == len(inside):
            break
        near = _nearest_free(logs, lo + _van_der_corput(i) * (hi - lo), taken)
        order.append(near)
        taken.add(near)
    order += [k for k in range(len(inside)) if k not in taken]
    return [*(inside[k] for k in order), *beyond]


def _nearest_free(logs: Sequence[float], target: float, taken: set[int]) -> int:
    """The index of the sorted ``logs`` nearest ``target`` that is not ``taken``."""
    right = bisect.bisect_left(logs, target)
    left = right - 1
    while left >= 0 and left in taken:
        left -= 1
    while right < len(logs) and right in taken:
        right += 1
    if left < 0 and right >= len(logs):
        raise ValueError("every index is taken")
    if right >= len(logs) or (left >= 0 and target - logs[left] <= logs[right] - target):
        return left
    return right


def _van_der_corput(i: int) -> float:
    """The ``i``-th point of the base-2 van der Corput sequence in [0, 1)."""
    x, denom = 0.0, 1.0
    while i:
        denom *= 2.0
        x += (i & 1) / denom
        i >>= 1
    return x


def coverage(jobs: Sequence[Job], pair: Any, m: Machine | None = None) -> dict[str, int]:
    """Jobs per predictor model of ``jobs`` on ``pair`` (what :func:`cover` counts)."""
    m = m or pair_machine(pair)
    families = {"cpu": "cpu" if pair.cpu_spec["kind"] == "llvm" else "gpu",
                "gpu": "cpu" if pair.gpu_spec["kind"] == "llvm" else "gpu"}  # fmt: skip
    counts = Counter(model_key(j, families, m) for j in jobs)
    counts.pop(None, None)
    return dict(sorted(counts.items()))


def _pool(grid: Sequence[float], max_flops: float, min_flops: float, seed: int,
          families: dict[str, str], m: Machine, max_bytes: float = math.inf
          ) -> dict[str, list[Job]]:
    """Per model, jobs of random ops within the FLOPs and bytes bounds, cheapest op first."""
    specs: list[OpSpec] = []
    for n, kind in enumerate(KIND_WEIGHTS):  # seeds apart from the profile's own draw
        drawn = sample_specs(POOL_DRAWS, seed + 7919 + n, max_flops, [kind], min_flops,
                             max_bytes)
        specs += drawn
        if kind.startswith("pool"):
            # a global pool (ResNet's, MobileNet's heads) has a GPU kernel of its own; CoDL's
            # draw of 2x2 and 3x3 windows never gives one
            whole = (OpSpec(kind, s.H, s.H, s.IC, s.IC, s.H, s.H) for s in drawn
                     if s.H >= GLOBAL_POOL_MIN_WINDOW)  # fmt: skip
            specs += [g for g in whole
                      if min_flops <= g.flops <= max_flops and g.in_bytes <= max_bytes]
    specs.sort(key=lambda s: s.flops)
    out: dict[str, list[Job]] = defaultdict(list)
    for job in compute_jobs(specs, grid):
        key = model_key(job, families, m)
        if key is not None:
            out[key].append(job)
    return out


@cache
def usage_max_bytes() -> int:
    """The largest input or output of the real networks' layers (:data:`USAGE_DIR`).

    Random ops past it measure nothing a real layer runs into and cost the profile time and
    memory: a global pool over 173x173x3760 (450 MB) and a 526x526x128 depthwise conv tripled
    the system time of a quick profile that drew up to 1e9 FLOPs.
    """
    layers = (spec for path in sorted(USAGE_DIR.glob("*.csv")) for _, spec in workload_specs(path))
    return max(max(s.in_bytes, s.out_bytes) for s in layers)


def usage_shares(families: dict[str, str], m: Machine, grid: Sequence[float]
                 ) -> dict[str, float]:
    """Each model's share of the sub-ops of real networks' layers (:data:`USAGE_DIR`)."""
    return dict(_usage(tuple(sorted(families.items())), m, tuple(grid)))


@cache
def _usage(families: tuple[tuple[str, str], ...], m: Machine, grid: tuple[float, ...]
           ) -> tuple[tuple[str, float], ...]:
    fams = dict(families)
    layers = [spec for path in sorted(USAGE_DIR.glob("*.csv")) for _, spec in workload_specs(path)]
    counts = Counter(model_key(j, fams, m) for j in compute_jobs(layers, grid))
    counts.pop(None, None)
    total = sum(counts.values()) or 1
    return tuple((k, n / total) for k, n in sorted(counts.items()))
