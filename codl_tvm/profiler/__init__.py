"""Profiling of sub-op kernels and sharing costs on a device pair (CoDL section 6).

Three ways, one sample format (:mod:`codl_tvm.profiler.schema`):

- local: :func:`profile` measures here;
- TVM RPC: :func:`profile` with ``rpc="host:port"`` or ``tracker="host:port", key=KEY``;
- offline bundle: :func:`codl_tvm.profiler.bundle.build_bundle` compiles here into a folder,
  ``bundle_runner.py`` (runtime-only TVM) measures it anywhere and writes the CSV.

Heavy TVM imports happen inside the functions so that ``bundle_runner`` stays runtime-only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from codl_tvm.profiler.schema import COLUMNS, SampleError, read_samples

__all__ = ["COLUMNS", "SampleError", "make_jobs", "profile", "read_samples"]

# min_flops keeps kernels above the VM's call overhead (~1 us), where timing is all noise
# n_sizes: every sharing op gets as many sizes as coverage.MIN_PER_MODEL gives a kernel
QUICK = {"n_specs": 50, "grid": "quick", "max_flops": 1e9, "min_flops": 1e5, "n_sizes": 12}
# the default profile: 250 random ops at six shares (as the shipped H100 profile measured), 6,012
# jobs on the cpu-pair, so that it ends within 30 minutes on a 2-core host; 400 ops at every
# tenth were 15,848 jobs, over an hour at the quick profile's pace (11 visits/s)
FULL = {"n_specs": 250, "grid": "default", "max_flops": 1e9, "min_flops": 1e5, "n_sizes": 12}


def make_jobs(
    quick: bool = False,
    workloads: Sequence[str | Path] = (),
    n_specs: int | None = None,
    max_flops: float | None = None,
    seed: int = 0,
    min_flops: float | None = None,
    shares: Sequence[float] | None = None,
    sharing: bool = True,
    max_share_bytes: int = 64 << 20,
    kinds: Sequence[str] | None = None,
    strata: Mapping[str, int] | None = None,
    pair: Any = None,
) -> list[Any]:
    """The jobs of one profiling run.

    Parameters
    ----------
    quick : bool
        A few hundred cheap samples (3 shares per dim, small ops) instead of the full set.
    workloads : list of path
        Workload CSVs (format of ``shared/workloads/conv2d.csv``); when given, their shapes are
        measured (both processors, both dims, the 0.1..1.0 grid) instead of random ones.
    n_specs, max_flops, min_flops : optional
        Random ops to draw from CoDL's ranges and the FLOPs bounds of each.
    shares : list of float, optional
        Each processor's shares to measure (default: ``space.DEFAULT_GRID``, 0.1/0.3/0.5/0.7/
        0.9/1.0; ``QUICK_GRID``, 0.3/0.6/1.0, when quick; every tenth for workloads).
    sharing : bool
        Also measure the sharing costs (copies, slice, concat, sync).
    kinds : list of str, optional
        Op kinds of the random ops (default: all of ``space.KIND_WEIGHTS``, weighted).
    strata : dict, optional
        Also this many random convs of each named stratum of ``space.STRATA`` (``deep``: few
        pixels, 256-4096 channels, weights up to hundreds of MB; ``body``: 28-416 pixels a
        side, 16-512 channels, 0.1-4 GFLOPs; ``pointwise``: their stride-1 1x1 convs;
        ``downsample``: stride-2 1x1 convs), each its own model (``random-deep``, ...).
    pair : DevicePair, optional
        Whose dispatch the random draw must cover: every kernel model the pair can run gets
        at least ``coverage.MIN_PER_MODEL`` jobs, more where real networks use it more
        (:func:`codl_tvm.profiler.coverage.cover`). Not for workload files (their shapes are
        measured as given) nor a draw restricted to ``kinds``.
    """
    from codl_tvm.profiler import space

    cfg = QUICK if quick else FULL
    grid = space.QUICK_GRID if cfg["grid"] == "quick" else space.DEFAULT_GRID
    specs: list[Any] = []
    if workloads:  # an explicit max_flops skips a workload's larger ops too
        specs += [(name, spec) for path in workloads for name, spec in space.workload_specs(path)
                  if max_flops is None or spec.flops <= max_flops]  # fmt: skip
        grid = space.FULL_GRID
    from codl_tvm.profiler.coverage import cover, usage_max_bytes

    max_bytes = usage_max_bytes()  # no random tensor larger than real networks' largest
    if not workloads or quick:  # quick + workloads: both, so the training set has both
        specs += space.sample_specs(
            n_specs or cfg["n_specs"],
            seed,
            max_flops or cfg["max_flops"],
            min_flops=cfg["min_flops"] if min_flops is None else min_flops,
            kinds=kinds,
            max_bytes=max_bytes,
        )
    specs += space.strata_specs(strata or {}, seed)
    grid = tuple(shares) if shares else grid
    jobs = space.compute_jobs(specs, grid)
    if pair is not None and kinds is None and (quick or not workloads):
        jobs = cover(jobs, pair, grid, max_flops or cfg["max_flops"],
                     cfg["min_flops"] if min_flops is None else min_flops, seed,
                     max_bytes=max_bytes)
    if sharing:
        jobs += space.sharing_jobs(cfg["n_sizes"], max_share_bytes)
    return jobs


def profile(
    pair: str | Any,
    output: str | Path,
    quick: bool = False,
    workloads: Sequence[str | Path] = (),
    rpc: str | None = None,
    tracker: str | None = None,
    key: str | None = None,
    arch: str | None = None,
    progress: bool = True,
    jobs: Sequence[Any] | None = None,
    proto: Any = None,
    **job_options: Any,
) -> dict[str, int]:
    """Measure a pair's kernels (locally or over RPC) into ``output``; resumes a partial file.

    Returns
    -------
    dict
        ``measured`` rows written now and ``resumed`` rows already in the file.

    ``proto`` (:class:`codl_tvm.profiler.rounds.Protocol`) sets rounds and repeat lengths.
    """
    from codl_tvm.device import DevicePair
    from codl_tvm.profiler.measure import Session, measure

    pair = pair if isinstance(pair, DevicePair) else DevicePair.parse(pair, arch=arch)
    if jobs is None:
        jobs = make_jobs(quick=quick, workloads=workloads, pair=pair, **job_options)
    session = Session(rpc=rpc, tracker=tracker, key=key)
    return measure(pair, jobs, output, session, progress=progress, proto=proto)
