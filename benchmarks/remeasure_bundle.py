"""Re-measure chosen rows of a samples file after their kernels changed: rebuild their jobs
into a profiling bundle, run it on the target, merge the new rows back.

    # here: a bundle of the H100 samples' GPU tiled / Winograd conv rows
    python benchmarks/remeasure_bundle.py bundle codl_tvm/data/samples-x86-cuda-h100.csv \
        --role gpu --algorithms gpu-conv-tiled,gpu-conv-tiled-split-k,gpu-winograd-2x2-3x3 \
        --arch sm_90 --mcpu sapphirerapids --num-cores 16 -o .devcarry/regpu-bundle
    # there: python3 codl_tvm/profiler/bundle_runner.py .devcarry/regpu-bundle -o new.csv --rounds 3
    # here: replace the old rows by the new ones (same sample key), keep everything else
    python benchmarks/remeasure_bundle.py merge codl_tvm/data/samples-x86-cuda-h100.csv new.csv \
        -o codl_tvm/data/samples-x86-cuda-h100.csv

New random ops measured on another lease need a control group of the file's rows
(``add_samples.py``); ``stratum`` bundles both (here: 24 convs of the deep-layer stratum,
``space.deep_specs``, or of the body-layer one, ``--body``, and 160 CPU + 60 GPU rows of the
file, model ``control``):

    python benchmarks/remeasure_bundle.py stratum codl_tvm/data/samples-x86-cuda-h100.csv \
        --deep 24 --seed 0 --controls 160,60 -o .devcarry/deep-bundle

Rows whose kernel changed, from several files, re-measured on another lease: ``--where``
picks them, ``--controls`` adds rows of the first file whose kernels did not change, and
``merge --rescale-against`` divides the new rows by the lease's speed (the controls' median
ratio to that file) and puts each where its old row was (session 17: the 1x1 stride-2 convs'
sampled pad pass; ``benchmarks/results/k1s2-h100``):

    W="--where op=conv2d --where KH=1 --where KW=1 --where SH=2"
    python benchmarks/remeasure_bundle.py bundle codl_tvm/data/samples-x86-cuda-h100.csv \
        benchmarks/results/deep-h100/deep-samples.csv ... --role cpu $W --controls 160,0 \
        --seed 17 -o .devcarry/k1s2-bundle
    # there: NAME=k1s2 ROUNDS=12 DEADLINE_S=330 bash benchmarks/run_remeasure_h100.sh
    python benchmarks/remeasure_bundle.py merge FILE k1s2.csv --rescale-against \
        codl_tvm/data/samples-x86-cuda-h100.csv $W --replace-only -o FILE   # for each FILE

Runs of one bundle that each stopped at a call's deadline pool their visits per row:

    python benchmarks/remeasure_bundle.py pool run1.csv run2.csv -o pooled.csv

Session 2 re-measured the GPU Winograd shapes this way; session 3 the GPU convs after their
FMA loop lost its bounds checks.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # add_samples

from codl_tvm.predictor.opspec import OpSpec  # noqa: E402
from codl_tvm.profiler import read_samples  # noqa: E402
from codl_tvm.profiler.noise import lease_ratios, same_kernel  # noqa: E402
from codl_tvm.profiler.schema import row_key  # noqa: E402
from codl_tvm.profiler.space import STRATA, Job  # noqa: E402


def row_job(r: dict) -> Job:
    """The profiling job that measured sample row ``r``."""
    if r["algorithm"] == "copy":  # a sharing row: its tensor is (1, IC, H, W)
        return Job(r["role"], r["op"], shape=(r["IC"], r["H"], r["W"]), model=r["model"])
    pad = tuple(int(p) for p in str(r["padding"]).split(":"))
    spec = OpSpec(r["op"], r["H"], r["W"], r["IC"], r["OC"], r["KH"], r["KW"], r["SH"], r["SW"],
                  pad, r["dilation"], r["groups"])  # fmt: skip
    return Job(r["role"], r["op"], spec, r["dim"], float(r["ratio"]), model=r["model"])


def _build(args: argparse.Namespace, jobs: list[Job]) -> dict:
    """Compile ``jobs`` for the x86-cuda pair of ``args`` into the bundle ``args.output``."""
    from codl_tvm.device import DevicePair
    from codl_tvm.profiler.bundle import build_bundle

    cpu = {"kind": "llvm", "mcpu": args.mcpu, "num-cores": args.num_cores}
    pair = DevicePair("x86-cuda", cpu, {"kind": "cuda", "arch": args.arch})
    return build_bundle(pair, jobs, args.output, max_bytes=int(args.max_mib * (1 << 20)))


def where_filter(conds: list[str]) -> Callable[[dict], bool]:
    """A row predicate from ``COL=VALUE`` conditions, all of which must hold (values compared
    as the samples file reads them: ``KH=1`` matches the integer 1)."""
    pairs = []
    for cond in conds:
        col, sep, val = cond.partition("=")
        if not sep or not col:
            raise SystemExit(f"--where {cond!r}: expected COL=VALUE")
        pairs.append((col, val))
    return lambda r: all(col in r and str(r[col]) == val for col, val in pairs)


def control_counts(text: str) -> tuple[int, int]:
    """``--controls CPU,GPU``: two counts of rows, or one clear error."""
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise SystemExit(f"--controls {text!r}: expected CPU,GPU row counts, e.g. 160,60")
    return int(parts[0]), int(parts[1])


def bundle_jobs(args: argparse.Namespace) -> tuple[list[dict], list[Job]]:
    """The rows ``bundle`` re-measures and their jobs, controls (rows of the first file that
    ``--where`` does not pick: their kernels did not change) last."""
    keep = where_filter(args.where)
    algos = set(args.algorithms.split(",")) if args.algorithms else None
    rows = [r for path in args.samples for r in read_samples(path)
            if r["role"] == args.role and (algos is None or r["algorithm"] in algos)
            and keep(r)]  # fmt: skip
    if not rows:
        raise SystemExit(f"{', '.join(args.samples)}: no {args.role} rows of algorithms "
                         f"{sorted(algos or ['any'])} where {' and '.join(args.where) or '-'}")
    rows = unique_rows(rows)
    jobs = [row_job(r) for r in rows]
    n_cpu, n_gpu = control_counts(args.controls)
    if n_cpu or n_gpu:
        others = [r for r in read_samples(args.samples[0]) if not keep(r)]
        jobs += control_jobs(others, n_cpu, n_gpu, args.seed)
    return rows, jobs


def unique_rows(rows: list[dict]) -> list[dict]:
    """The first row of each sample key: files that share rows (a CNN run's control rows are
    rows of the samples file) measure each sub-op once, and ``join`` takes no key twice."""
    seen: set[tuple[str, ...]] = set()
    out = []
    for r in rows:
        key = row_key(r)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def bundle(args: argparse.Namespace) -> int:
    rows, jobs = bundle_jobs(args)
    man = _build(args, jobs)
    print(f"{len(rows)} rows + {len(jobs) - len(rows)} controls -> {args.output} "
          f"({man['size_bytes'] / 2**20:.1f} MiB, {man['left_out']} left out)")
    return 0


# the shares each processor ran in the H100 samples' CNN and random rows
SAMPLE_SHARES = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)


def control_jobs(rows: list[dict], n_cpu: int, n_gpu: int, seed: int) -> list[Job]:
    """A seeded draw of ``n_cpu`` + ``n_gpu`` compute rows of the file, as jobs of model
    ``control`` (the lease's speed per processor, :mod:`add_samples`)."""
    rng = np.random.default_rng(seed)
    jobs: list[Job] = []
    for role, n in (("cpu", n_cpu), ("gpu", n_gpu)):
        pool = [r for r in rows if r["role"] == role and r["algorithm"] != "copy"]
        picks = rng.choice(len(pool), size=min(n, len(pool)), replace=False)
        jobs += [dataclasses.replace(row_job(pool[int(i)]), model="control") for i in picks]
    return jobs


def stratum(args: argparse.Namespace) -> int:
    from codl_tvm.profiler.space import compute_jobs, strata_specs

    n_cpu, n_gpu = control_counts(args.controls)
    counts = {name: getattr(args, name) for name in STRATA}
    if not any(counts.values()) or min(counts.values()) < 0:
        flags = ", ".join(f"--{name}" for name in STRATA)
        raise SystemExit(f"stratum: give one of {flags} N (ops to draw, N > 0)")
    specs = strata_specs(counts, args.seed)
    new = compute_jobs(specs, SAMPLE_SHARES)
    jobs = new + control_jobs(read_samples(args.samples), n_cpu, n_gpu, args.seed)
    man = _build(args, jobs)
    print(f"{len(new)} new jobs of {len(specs)} stratum convs + {len(jobs) - len(new)} controls "
          f"-> {args.output} ({man['size_bytes'] / 2**20:.1f} MiB, {man['left_out']} left out)")
    return 0


def merge(args: argparse.Namespace) -> int:
    """Re-measured rows take their old rows' places in ``samples``; rows it lacks are appended
    (``--replace-only``: left out). With ``--rescale-against REF`` the new rows were measured
    on another lease: each processor's times are divided by the median ratio of its control
    rows to ``REF`` (``add_samples.lease_speed_rows``). Controls matching ``--where`` (rows
    whose kernel changed, drawn as controls before ``bundle`` left them out) are no controls:
    they take their rows' places with their rows' models."""
    import csv

    from codl_tvm.profiler.schema import row_key

    typed = read_samples(args.new)  # a broken or foreign file stops here, before any write
    with open(args.samples, newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames
        old = list(reader)
    with open(args.new, newline="") as f:
        added = list(csv.DictReader(f))
    if args.onto_lease and not args.rescale_against:
        raise SystemExit("merge: --onto-lease needs --rescale-against REF (the lease both "
                         "runs' controls are measured against)")
    if args.rescale_against:
        added = _rescaled(added, typed, args)
    models = {row_key(r): r["model"] for r in old}
    fresh = {row_key(r): dict(r, model=models.get(row_key(r), r["model"])) for r in added}
    # a new row takes its old row's place: seeded splits of the file keep their membership,
    # so accuracy before and after a re-measure compares the same test rows
    merged = [fresh.pop(row_key(r), r) for r in old]
    replaced = len(added) - len(fresh)
    appended = [] if args.replace_only else list(fresh.values())
    tmp = Path(args.output).with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(merged + appended)
    read_samples(tmp)  # the merged file must load before it replaces anything
    tmp.replace(args.output)
    print(f"{replaced} rows replaced in place, {len(appended)} added, "
          f"{len(fresh) - len(appended)} left out -> {args.output}")
    return 0


def _rescaled(added: list[dict], typed: list[dict], args: argparse.Namespace) -> list[dict]:
    """``added`` (the new file's rows as text; ``typed``: as ``read_samples`` reads them) on
    ``args.rescale_against``'s scale, the true controls dropped; with ``--onto-lease``, on the
    lease of ``args.samples`` instead (a raw run with control rows of its own)."""
    from add_samples import check_controls, lease_speed_rows, scaled

    changed = where_filter(args.where)
    measured = typed + (read_samples(args.controls_from) if args.controls_from else [])
    ref = read_samples(args.rescale_against)
    if args.controls_where:
        controls = _same_kernel_rows(measured, ref, where_filter(args.controls_where))
        known = {row_key(t) for t in controls}  # controls, whatever their model: no new rows
        keep = [r for r, t in zip(added, typed, strict=True) if row_key(t) not in known]
    else:
        controls = [t for t in measured if t["model"] == "control" and not changed(t)]
        keep = [r for r, t in zip(added, typed, strict=True)
                if r["model"] != "control" or changed(t)]  # fmt: skip
    speed = lease_speed_rows(ref, controls)
    roles = {r["role"] for r in keep}
    check_controls(speed, roles, args.controls_from or args.new)
    print("lease speed " + ", ".join(f"{k} {v['median']:.3f} (n {v['n']})"
                                     for k, v in sorted(speed.items())))
    factor = {k: v["median"] for k, v in speed.items()}
    if args.onto_lease:
        own = [t for t in read_samples(args.samples) if t["model"] == "control"]
        theirs = lease_speed_rows(ref, own)
        check_controls(theirs, roles, args.samples)
        factor = {k: v / theirs[k]["median"] for k, v in factor.items() if k in theirs}
        print(f"onto {args.samples}'s lease: " + ", ".join(
            f"{k} {theirs[k]['median']:.3f}" for k in sorted(factor)))
    return [scaled(r, factor[r["role"]]) for r in keep]


def _same_kernel_rows(measured: list[dict], ref: list[dict], keep: Callable[[dict], bool]
                      ) -> list[dict]:
    """The measured rows ``keep`` picks that ``ref`` measured with the same kernel, as controls:
    each one's ratio to its ``ref`` row is the lease's speed on that class of sub-ops."""
    by_key = {row_key(r): r for r in ref}
    return [dict(t, model="control") for t in measured
            if keep(t) and row_key(t) in by_key and same_kernel(t, by_key[row_key(t)])]


# a run's lease factor per group of rows needs this many rows in the group, else the run's
# factor over all its rows stands in
MIN_FACTOR_ROWS = 8


def lease_factors(first: dict[tuple, dict], run: dict[tuple, dict],
                  by: str | None) -> dict[str, float]:
    """How much slower ``run``'s lease ran than ``first``'s: the median, over the rows both
    measured, of ``run``'s estimate over ``first``'s, per value of the column ``by`` (key
    ``"*"``: all rows). A group of fewer than :data:`MIN_FACTOR_ROWS` rows gets no factor of
    its own (:func:`row_factor` falls back to ``"*"``)."""
    ratios = lease_ratios(list(first.values()), run, by)
    return {g: float(np.median(v)) for g, v in ratios.items()
            if g == "*" or len(v) >= MIN_FACTOR_ROWS}  # fmt: skip


def row_factor(factors: dict[str, float], row: dict, by: str | None) -> float:
    """The lease factor of ``row``: its group's, else the run's over all rows."""
    return factors.get(str(row[by]), factors["*"]) if by else factors["*"]


def _scaled_visits(row: dict, factor: float) -> str:
    return ";".join(f"{float(x) / factor:.3f}" for x in row["round_us"].split(";") if x)


def pool(args: argparse.Namespace) -> int:
    """One file of the rows measured in every run, each with the visits of all of them.

    Runs on one lease that each hit a call's time limit add up to more visits per sample
    (the estimate is the mean of the lower half of its visits: more visits, less noise).
    Runs on other leases (the CPU's speed moves from lease to lease) need ``--rescale``: the
    visits of every run after the first are divided by that run's lease factor
    (:func:`lease_factors`, per ``--rescale-by`` column), so all visits are on the first run's
    scale, and the factors are printed.
    """
    import csv

    from codl_tvm.profiler.rounds import sample_estimate
    from codl_tvm.profiler.schema import row_key

    runs = []
    for path in args.runs:
        read_samples(path)  # a broken or foreign file stops here
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            runs.append({row_key(r): r for r in reader})
            columns = reader.fieldnames
    by = args.rescale_by if args.rescale else None
    factors = [{"*": 1.0}] + [lease_factors(runs[0], run, by) if args.rescale else {"*": 1.0}
                              for run in runs[1:]]  # fmt: skip
    for path, f in zip(args.runs[1:], factors[1:], strict=True):
        if args.rescale:
            print(f"{path}: lease factor " + ", ".join(f"{g} {v:.3f}" for g, v in f.items()))
    # a row whose kernel changed between the runs (another ``algorithm``) is left out: its
    # visits measured two kernels
    keys = [k for k in runs[0]
            if all(k in run and same_kernel(runs[0][k], run[k]) for run in runs[1:])]
    rows = []
    for key in keys:
        parts = [run[key] for run in runs]
        scaled = [_scaled_visits(r, row_factor(f, r, by)) for r, f in zip(parts, factors,
                                                                          strict=True)]
        visits = [float(x) for v in scaled for x in v.split(";") if x]
        rows.append(dict(parts[0], latency_us=f"{sample_estimate(visits):.3f}",
                         median_us=f"{float(np.median(visits)):.3f}",
                         spread_us=max(float(r["spread_us"]) for r in parts),
                         repeat=sum(int(r["repeat"]) for r in parts), rounds=len(visits),
                         round_us=";".join(scaled)))  # fmt: skip
    tmp = Path(args.output).with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(rows)
    read_samples(tmp)
    tmp.replace(args.output)
    print(f"{len(rows)} rows pooled from {len(runs)} runs -> {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bundle", help="rows of samples files (the first one's for controls)")
    b.add_argument("samples", nargs="+")
    b.add_argument("--role", required=True)
    b.add_argument("--algorithms", help="comma-separated (default: any)")
    b.add_argument("--where", action="append", default=[], metavar="COL=VALUE",
                   help="only rows whose column has this value (repeatable; all must hold)")
    b.add_argument("--controls", default="0,0",
                   help="control rows of the first file, CPU,GPU (another lease's speed)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--arch", default="sm_90")
    b.add_argument("--mcpu", default="sapphirerapids")
    b.add_argument("--num-cores", type=int, default=16)
    b.add_argument("--max-mib", type=float, default=40)
    b.add_argument("-o", "--output", required=True)
    s = sub.add_parser("stratum", help="random convs of the strata (space.STRATA) + controls")
    s.add_argument("samples")
    for name, st in STRATA.items():
        s.add_argument(f"--{name}", type=int, default=0, help=f"random {st.about} to draw")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--controls", default="160,60", help="control rows: CPU,GPU")
    for name, default in (("--arch", "sm_90"), ("--mcpu", "sapphirerapids")):
        s.add_argument(name, default=default)
    s.add_argument("--num-cores", type=int, default=16)
    s.add_argument("--max-mib", type=float, default=40)
    s.add_argument("-o", "--output", required=True)
    m = sub.add_parser("merge")
    m.add_argument("samples")
    m.add_argument("new")
    m.add_argument("--rescale-against", metavar="REF",
                   help="the new rows come from another lease: scale them by their controls")
    m.add_argument("--controls-from", metavar="RUN",
                   help="control rows measured in the same call by another bundle's run")
    m.add_argument("--controls-where", action="append", default=[], metavar="COL=VALUE",
                   help="controls: the rows of the runs matching these that REF measured with "
                   "the same kernel (default: the rows of model control)")
    m.add_argument("--onto-lease", action="store_true",
                   help="SAMPLES is a raw run with control rows: put the new rows on its lease")
    m.add_argument("--where", action="append", default=[], metavar="COL=VALUE",
                   help="the re-measured rows' filter (as given to bundle): matching controls "
                   "are re-measured rows, not controls")
    m.add_argument("--replace-only", action="store_true",
                   help="leave out new rows that replace none of the file's")
    m.add_argument("-o", "--output", required=True)
    p = sub.add_parser("pool", help="the visits of several runs of one bundle, pooled per row")
    p.add_argument("--rescale", action="store_true",
                   help="runs from other leases: put every run's visits on the first run's scale")
    p.add_argument("--rescale-by", default="algorithm",
                   help="column whose groups get a lease factor each (default: algorithm)")
    p.add_argument("runs", nargs="+")
    p.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    return {"bundle": bundle, "stratum": stratum, "merge": merge, "pool": pool}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
