"""``codl-tvm profile`` (local / RPC / bundle run), ``profile-bundle`` (build), ``profile-join``
(several bundles measured as one), ``profile-noise`` and ``profile-resummarize`` (a samples
file's reproducibility, its latencies recomputed). Library: :mod:`codl_tvm.profiler`."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from ..outputs import check_output_file, check_output_folder
from ..profiler.bundle_runner import add_protocol_arguments, protocol_from_args, run_bundle
from ..profiler.space import STRATA
from . import Command


def _count(text: str) -> int:
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n}: a count of ops is 0 or more")
    return n


def _add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kinds", help="comma-separated op kinds of the random ops "
                        "(conv2d, depthwise, dense, pool_max, pool_avg, elementwise)")
    parser.add_argument("--n-specs", type=int, help="random ops to draw (default 50 quick, 250)")
    parser.add_argument("--shares", type=_shares,
                        help="comma-separated GPU shares to measure of each op (default: "
                        "0.1,0.3,0.5,0.7,0.9,1.0; 0.3,0.6,1.0 with --quick; every tenth "
                        "for --workload)")
    for name, stratum in STRATA.items():
        parser.add_argument(f"--{name}", type=_count, default=0, metavar="N",
                            help=f"also N random {stratum.about}")
    parser.add_argument("--no-sharing", action="store_true",
                        help="leave out the sharing costs (copies, slice, concat, sync)")


def _shares(text: str) -> list[float]:
    try:
        shares = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: shares are numbers, e.g. 0.2,0.5,1.0") from None
    bad = [s for s in shares if not 0.0 < s <= 1.0]
    if bad:
        raise argparse.ArgumentTypeError(f"shares {bad}: a share is in (0, 1]")
    return shares


def _sampling_options(args: argparse.Namespace) -> dict:
    return {"kinds": args.kinds.split(",") if args.kinds else None, "n_specs": args.n_specs,
            "shares": args.shares,
            "strata": {name: getattr(args, name) for name in STRATA},
            "sharing": not args.no_sharing}


def _add_profile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pair", default="cpu-pair", help="device pair preset (default cpu-pair)")
    parser.add_argument("--arch", help="CUDA arch of an x86-cuda pair, e.g. sm_90")
    parser.add_argument("--quick", action="store_true",
                        help="about 800 samples, a few minutes: 50 random ops and top-ups "
                        "that cover every kernel of the dispatch")
    parser.add_argument(
        "--workload",
        action="append",
        default=[],
        metavar="CSV",
        help="measure the shapes of a workload CSV (repeatable)",
    )
    parser.add_argument("--max-flops", type=float, help="skip ops with more FLOPs than this")
    parser.add_argument("--seed", type=int, default=0)
    _add_sampling_arguments(parser)
    way = parser.add_mutually_exclusive_group()
    way.add_argument("--rpc", metavar="HOST:PORT", help="measure on a TVM RPC server")
    way.add_argument("--rpc-tracker", metavar="HOST:PORT", help="measure through a TVM tracker")
    way.add_argument("--bundle", metavar="DIR", help="measure a bundle built by `profile-bundle`")
    parser.add_argument("--rpc-key", help="device key for --rpc-tracker")
    parser.add_argument("--deadline-s", type=float, default=420.0, help="bundle runs stop here")
    add_protocol_arguments(parser)
    parser.add_argument("-o", "--output", required=True, help="samples CSV (appended, resumable)")


def _run_profile(args: argparse.Namespace) -> int:
    check_output_file(args.output, [p for p in (args.bundle, *(args.workload or [])) if p])
    if args.bundle:
        counts = run_bundle(args.bundle, args.output, args.deadline_s,
                            proto=protocol_from_args(args))  # fmt: skip
    else:
        from ..profiler import profile

        opts = {"max_flops": args.max_flops, "seed": args.seed, "proto": protocol_from_args(args),
                **_sampling_options(args)}
        counts = profile(
            args.pair, args.output, quick=args.quick, workloads=args.workload, rpc=args.rpc,
            tracker=args.rpc_tracker, key=args.rpc_key, arch=args.arch, **opts,
        )  # fmt: skip
    print(json.dumps(counts))
    return 0


def _add_bundle(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pair", required=True, help="device pair preset, e.g. x86-cuda")
    parser.add_argument("--arch", help="CUDA arch, e.g. sm_90")
    parser.add_argument("--mcpu", help="llvm mcpu of the target host, e.g. sapphirerapids")
    parser.add_argument("--num-cores", type=int,
                        help="CPU cores of the target host, the workers of TVM's CPU pool "
                        "(default: this machine's physical cores)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workload", action="append", default=[], metavar="CSV")
    parser.add_argument("--max-flops", type=float)
    parser.add_argument("--seed", type=int, default=0)
    _add_sampling_arguments(parser)
    parser.add_argument("--max-mib", type=float, default=40.0, help="bundle size cap")
    parser.add_argument("-o", "--output", required=True, help="bundle folder to create")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace OUTPUT if it is an existing codl-tvm bundle")


def _run_bundle(args: argparse.Namespace) -> int:
    from ..device import DevicePair
    from ..profiler import make_jobs
    from ..profiler.bundle import build_bundle

    pair = DevicePair.parse(args.pair, arch=args.arch, num_cores=args.num_cores)
    if args.mcpu:
        pair = replace(pair, cpu_spec={**pair.cpu_spec, "mcpu": args.mcpu}, _cache={})
    jobs = make_jobs(args.quick, args.workload, max_flops=args.max_flops, seed=args.seed,
                     pair=pair, **_sampling_options(args))  # fmt: skip
    check_output_folder(args.output, args.workload, args.overwrite)  # before compiling
    man = build_bundle(pair, jobs, args.output, max_bytes=int(args.max_mib * (1 << 20)),
                       overwrite=args.overwrite)
    n = sum(len(lib["entries"]) for lib in man["libs"])
    print(json.dumps({"kernels": n, "libs": len(man["libs"]), "size_bytes": man["size_bytes"],
                      "left_out": man["left_out"], "left_out_by": man["left_out_by"],
                      "output": args.output}))  # fmt: skip
    return 0


def _add_join(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundles", nargs="+", help="bundle folders built for one pair")
    parser.add_argument("-o", "--output", required=True, help="the joined bundle's folder")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace OUTPUT if it is an existing codl-tvm bundle")


def _run_join(args: argparse.Namespace) -> int:
    """One bundle of several, their rows interleaved when measured (new shapes + controls)."""
    from ..profiler.bundle import join_bundles

    man = join_bundles(args.bundles, args.output, overwrite=args.overwrite)
    n = sum(len(lib["entries"]) for lib in man["libs"])
    print(json.dumps({"kernels": n, "libs": len(man["libs"]), "size_bytes": man["size_bytes"],
                      "output": args.output}))  # fmt: skip
    return 0


def _add_noise(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("samples")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--model", action="append",
                        help="only the rows of this samples 'model' (repeatable), e.g. YOLO-V2")


def _run_noise(args: argparse.Namespace) -> int:
    """Print how often repeated measurements of one sample agree within +-10%."""
    from ..profiler.noise import format_noise, noise_rows
    from ..profiler.schema import read_samples

    samples = read_samples(args.samples)
    if args.model:
        samples = [r for r in samples if r["model"] in args.model]
        if not samples:
            raise ValueError(f"{args.samples}: no rows of model {', '.join(args.model)}")
    rows = noise_rows(samples)
    print(json.dumps(rows, indent=1) if args.json else format_noise(rows))
    return 0


def _add_resummarize(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("samples")
    parser.add_argument("-o", "--output", required=True)


def _run_resummarize(args: argparse.Namespace) -> int:
    """Recompute each sample's latency from its visits with the current estimator."""
    from ..profiler.rounds import resummarize
    from ..profiler.schema import read_samples

    counts = resummarize(args.samples, args.output)
    read_samples(args.output)  # what was written must load
    print(json.dumps(counts))
    return 0


COMMANDS = {
    "profile": Command("measure sub-op kernels and sharing costs on a pair", _add_profile,
                       _run_profile),
    "profile-bundle": Command("compile an offline profiling bundle to run elsewhere",
                              _add_bundle, _run_bundle),
    "profile-join": Command("join bundles built for one pair, measured interleaved (new "
                            "shapes beside control rows)", _add_join, _run_join),
    "profile-noise": Command("agreement of repeated measurements of a samples file (within "
                             "+-10 percent)", _add_noise, _run_noise),
    "profile-resummarize": Command("recompute a samples file's latency_us from each row's "
                                   "visits with the current estimator", _add_resummarize,
                                   _run_resummarize),
}

# ``python -m codl_tvm.profiler NAME``: the same commands under their short names
MODULE_COMMANDS = {"profile": COMMANDS["profile"], "bundle": COMMANDS["profile-bundle"],
                   "join": COMMANDS["profile-join"], "noise": COMMANDS["profile-noise"],
                   "resummarize": COMMANDS["profile-resummarize"]}  # fmt: skip
