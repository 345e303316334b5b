"""The measurement protocol every profiling way shares: warm-up, timed repeats, rounds.

Standard library + numpy + the TVM runtime only (``bundle_runner.py`` imports this file as a
sibling module where only runtime-only TVM exists).

One *sample* is measured in ``rounds`` separate visits; a visit warms the kernel up, then times
``repeats`` repeats of ``number`` calls each lasting at least ``min_repeat_ms`` (fewer repeats
where that would pass ``max_sample_ms``). Between two visits of a sample every other sample is
visited once, in an order reshuffled each round, so a transient disturbance (another process,
a clock change) hits different samples in different rounds instead of a run of neighbours.

Per visit the estimate is the lower quartile of its repeats (interrupts only make a repeat
slower, so the low end is the reproducible part); the sample's ``latency_us`` is the mean of
the lower half of its visits' estimates (:func:`sample_estimate`). The row keeps ``median_us``
(median of all repeats), ``spread_us``, ``repeat`` (all repeats), ``rounds`` and ``round_us``
(each visit's estimate, ``;``-joined).

A CPU sample of an op with weights (:data:`WEIGHTED_OPS`) is timed one call per repeat, with
every argument but the first (its activation) evicted from the caches before each call (TVM's
``cache_flush_cpu_non_first_arg``, as MetaSchedule's runner does): in a whole model each op
reads its weights from memory, because the ops between two calls of it stream other data
through the caches. Timed warm, a CPU-only model's kernels add up to 0.67-0.98 of the model;
with their weights evicted, 0.87-1.03 on 20 of 21 (PREDICTOR.md, "Weights come from memory").
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

# measured columns beyond the original schema; files without them still load (schema.py)
EXTRA_COLUMNS: tuple[str, ...] = ("median_us", "rounds", "round_us")


@dataclass(frozen=True)
class Protocol:
    """How one sample is timed (defaults fit a full H100 bundle in ~7 minutes)."""

    rounds: int = 3
    min_repeat_ms: float = 10.0
    repeats: int = 5
    warmup_ms: float = 5.0
    max_sample_ms: float = 120.0  # cap of one visit's timed part (slow kernels: fewer repeats)
    seed: int = 0
    cpu_cold_weights: bool = True  # CPU ops with weights: weights evicted before each call

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ops whose arguments after the first are weights (the profiler's one-op functions: x, w)
WEIGHTED_OPS = frozenset({"conv2d", "depthwise", "dense"})
FLUSH_WEIGHTS = "cache_flush_cpu_non_first_arg"  # TVM runtime: clflush each arg but the first
COLD_MAX_REPEATS = 200  # cold repeats are single calls: short kernels get more of them
_CPU = 1  # DLPack's kDLCPU; a remote device adds multiples of 128 (TVM's RPC session mask)


def cold_weights(proto: Protocol, op: str | None, dev: Any) -> bool:
    """Whether a sample of ``op`` timed on ``dev`` reads its weights evicted from the caches."""
    on_cpu = int(dev.dlpack_device_type()) % 128 == _CPU
    return proto.cpu_cold_weights and op in WEIGHTED_OPS and on_cpu


def time_function(
    vm: Any, name: str, args: list[Any], dev: Any, proto: Protocol | None = None,
    cold: bool = False,
) -> tuple[list[float], float]:
    """One visit of ``vm[name](*args)``: (per-call microseconds of each repeat, first call s).

    Warm-up: the first call (loading, allocation), then more calls until ``warmup_ms`` has
    passed (at most 20). The VM's stateful API (``set_input`` + ``invoke_stateful``) works both
    here and over RPC. ``cold`` (:func:`cold_weights`): each repeat is one call with every
    argument but the first evicted from the caches, and a visit times as many such calls as
    ``repeats`` repeats of ``min_repeat_ms`` hold (at least ``repeats``).
    """
    proto = proto or Protocol()
    vm.set_input(name, *args)
    t0 = time.perf_counter()
    vm.invoke_stateful(name)
    dev.sync()
    first_s = time.perf_counter() - t0
    t0, calls = time.perf_counter(), 0
    while calls < 20 and time.perf_counter() - t0 < proto.warmup_ms / 1e3:
        vm.invoke_stateful(name)
        dev.sync()
        calls += 1
    call_s = (time.perf_counter() - t0) / calls if calls else first_s
    number = max(1, int(np.ceil(proto.min_repeat_ms / 1e3 / max(call_s, 1e-7))))
    if cold:
        want = proto.repeats * proto.min_repeat_ms / 1e3 / max(call_s, 1e-7)
        fits = int(proto.max_sample_ms / 1e3 / max(call_s, 1e-9))
        repeat = max(1, min(fits, COLD_MAX_REPEATS, max(proto.repeats, int(want))))
        res = vm.time_evaluator(name, dev, number=1, repeat=repeat, f_preproc=FLUSH_WEIGHTS)(
            *args)
        return [float(c) * 1e6 for c in res.results], first_s
    fits = int(proto.max_sample_ms / 1e3 / max(number * call_s, 1e-9))
    repeat = max(1, min(proto.repeats, fits))
    res = vm.time_evaluator("invoke_stateful", dev, number=number, repeat=repeat)(name)
    return [float(c) * 1e6 for c in res.results], first_s


def time_copy(
    src: Any, dst: Any, dev: Any, proto: Protocol | None = None,
    copy: Callable[[Any, Any], None] | None = None,
) -> tuple[list[float], float]:
    """One visit of the staged copy ``src -> dst`` and a sync of ``dev``: the data sharing a
    split runs (:mod:`codl_tvm.passes.stage_cross_device_copies`), between two tensors made
    once, one of them in the host's pinned memory where the GPU is CUDA.

    Returns what :func:`time_function` returns; the protocol (warm-up, ``number`` calls per
    repeat of at least ``min_repeat_ms``, capped repeats) is the same. ``copy(src, dst)``
    replaces TVM's copy (a block copy of rows).
    """
    proto = proto or Protocol()

    def call() -> None:
        if copy is None:
            src.copyto(dst)
        else:
            copy(src, dst)
        dev.sync()

    t0 = time.perf_counter()
    call()
    first_s = time.perf_counter() - t0
    t0, calls = time.perf_counter(), 0
    while calls < 20 and time.perf_counter() - t0 < proto.warmup_ms / 1e3:
        call()
        calls += 1
    call_s = (time.perf_counter() - t0) / calls if calls else first_s
    number = max(1, int(np.ceil(proto.min_repeat_ms / 1e3 / max(call_s, 1e-7))))
    fits = int(proto.max_sample_ms / 1e3 / max(number * call_s, 1e-9))
    results = []
    for _ in range(max(1, min(proto.repeats, fits))):
        t0 = time.perf_counter()
        for _ in range(number):
            call()
        results.append((time.perf_counter() - t0) / number * 1e6)
    return results, first_s


def visit_estimate(costs_us: Sequence[float]) -> float:
    """One visit's estimate: the lower quartile of its repeats."""
    return float(np.percentile(np.asarray(costs_us), 25))


def sample_estimate(visit_us: Sequence[float]) -> float:
    """A sample's latency from its visits' estimates: the mean of their lower half.

    On the H100 machine's KVM guest a CPU kernel runs for a whole visit (tens of ms) in one of a
    few speed states, 20-40% apart, and the next visit may find another; no thread setting,
    input reuse or shorter repeat changed that (PREDICTOR.md).
    Slow states are the disturbance, so the lower half is kept: on its 42 noisiest-chosen
    kernels, two disjoint sets of 5 visits agree within +-10% in 78% of cases this way (62% by
    their medians), sets of 12 visits in 89% (81%).
    """
    v = np.sort(np.asarray(visit_us, dtype=float))
    return float(np.mean(v[: max(1, len(v) // 2)]))


def summarize(visits: Sequence[Sequence[float]]) -> dict[str, Any]:
    """The measured columns of a row from its visits' repeat costs (microseconds)."""
    est = [visit_estimate(v) for v in visits]
    pooled = np.concatenate([np.asarray(v, dtype=float) for v in visits])
    return {
        "latency_us": round(sample_estimate(est), 3),
        "median_us": round(float(np.median(pooled)), 3),
        "spread_us": round(float((pooled.max() - pooled.min()) / 2), 3),
        "repeat": int(len(pooled)),
        "rounds": len(est),
        "round_us": ";".join(f"{e:.3f}" for e in est),
    }


def resummarize(src: str | Path, dst: str | Path) -> dict[str, int]:
    """Rewrite ``latency_us`` of every row of >= 2 rounds with :func:`sample_estimate`.

    For samples files written while the sample was the median of its visits: ``round_us``
    keeps each visit's estimate, so the new summary needs no new measurement. The output is
    written to a temporary file first and replaces ``dst`` at once; ``dst`` may not be ``src``.
    """
    with open(src, newline="") as fh:
        reader = csv.DictReader(fh)
        columns, rows = list(reader.fieldnames or []), list(reader)
    if "round_us" not in columns or "latency_us" not in columns:
        raise ValueError(f"{src}: no 'round_us' / 'latency_us' columns to summarise")
    changed = 0
    for row in rows:
        visits = [float(x) for x in str(row.get("round_us") or "").split(";") if x]
        if len(visits) >= 2:
            new = f"{sample_estimate(visits):.3f}"
            changed += new != row["latency_us"]
            row["latency_us"] = new
    dst = Path(dst)
    if dst.resolve() == Path(src).resolve():
        raise ValueError(f"output {dst} is the input; name another file")
    # this file runs where only numpy and the TVM runtime are (no codl_tvm.outputs)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, columns)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, dst)
    return {"rows": len(rows), "changed": changed}


def interleave(groups: Sequence[Sequence[Any]]) -> list[Any]:
    """Round-robin over groups: a0 b0 c0 a1 b1 c1 ... (each group keeps its order)."""
    out: list[Any] = []
    for i in range(max((len(g) for g in groups), default=0)):
        out += [g[i] for g in groups if i < len(g)]
    return out


class RoundBook:
    """The samples CSV plus a journal of visits (``OUT.rounds.jsonl``) while rounds run.

    Rows already in the CSV and not in the journal are final and skipped. Every visit is
    appended to the journal at once (an interrupted run resumes where it stopped); ``flush``
    rewrites the CSV (atomically) with the journal's rows summarised, ``close`` also drops
    the journal.
    """

    def __init__(self, path: str | Path, columns: Sequence[str], key: Callable) -> None:
        self.path = Path(path)
        self.journal = self.path.with_name(self.path.name + ".rounds.jsonl")
        self.columns = list(columns) + [c for c in EXTRA_COLUMNS if c not in columns]
        self.key = key
        self.base: dict[tuple, dict[str, Any]] = {}
        if self.path.exists() and self.path.stat().st_size > 0:
            with self.path.open(newline="") as fh:
                for row in csv.DictReader(fh):
                    self.base[key(row)] = row
        self.visits: dict[tuple, list[list[float]]] = {}
        self.rows: dict[tuple, dict[str, Any]] = {}
        if self.journal.exists():
            for line in self.journal.read_text().splitlines():
                if line.strip():
                    doc = json.loads(line)
                    self._add(doc["row"], doc["costs"])

    def final(self, row: dict[str, Any]) -> bool:
        k = self.key(row)
        return k in self.base and k not in self.visits

    def n_visits(self, row: dict[str, Any]) -> int:
        return len(self.visits.get(self.key(row), []))

    def add(self, row: dict[str, Any], costs_us: Sequence[float]) -> None:
        with self.journal.open("a") as fh:
            fh.write(json.dumps({"row": row, "costs": list(costs_us)}) + "\n")
        self._add(row, list(costs_us))

    def _add(self, row: dict[str, Any], costs: list[float]) -> None:
        k = self.key(row)
        self.visits.setdefault(k, []).append(costs)
        self.rows[k] = row

    def flush(self) -> None:
        out = dict(self.base)
        for k, visits in self.visits.items():
            out[k] = {**self.rows[k], **summarize(visits)}
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, self.columns, extrasaction="ignore")
            writer.writeheader()
            for row in out.values():
                writer.writerow({c: _old_default(row, c) for c in self.columns})
        os.replace(tmp, self.path)

    def close(self) -> None:
        self.flush()
        self.journal.unlink(missing_ok=True)


def _old_default(row: dict[str, Any], col: str) -> Any:
    """Rows of files written before the rounds protocol: one visit, median = latency."""
    val = row.get(col)
    if val not in (None, ""):
        return val
    return {"median_us": row.get("latency_us"), "rounds": 1,
            "round_us": row.get("latency_us")}.get(col, val)  # fmt: skip


@dataclass
class Item:
    """One sample to measure: its row template, a visit function and its budget group."""

    row: dict[str, Any]
    visit: Callable[[], tuple[list[float], float]]
    group: str = ""  # items of a group after one slower than max_call_s are dropped
    flops: float = 0.0


def run_rounds(
    items: Sequence[Item],
    book: RoundBook,
    proto: Protocol,
    deadline_s: float = 420.0,
    max_call_s: float = 3.0,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, int]:
    """Visit every item ``proto.rounds`` times, round by round, until the deadline.

    Round 1 goes in the given (interleaved) order, later rounds in a seeded shuffle. A group's
    items at least as costly as one whose first call took more than ``max_call_s`` are
    measured in no later round and, if not yet visited, skipped. Returns counts.
    """
    start = time.perf_counter()
    todo = [it for it in items if not book.final(it.row)]
    counts = {"measured": 0, "resumed": len(items) - len(todo), "skipped": 0, "visits": 0}
    slow: dict[str, float] = {}
    rng = np.random.default_rng(proto.seed)
    for rnd in range(proto.rounds):
        order = list(todo) if rnd == 0 else [todo[i] for i in rng.permutation(len(todo))]
        for it in order:
            if book.n_visits(it.row) > rnd or it.flops >= slow.get(it.group, np.inf):
                continue
            if time.perf_counter() - start > deadline_s:
                break
            costs, first_s = it.visit()
            book.add(it.row, costs)
            counts["visits"] += 1
            if first_s > max_call_s:
                slow[it.group] = min(slow.get(it.group, np.inf), it.flops)
            if progress:
                progress(counts["visits"], len(todo) * proto.rounds)
        book.flush()
    measured = [it for it in todo if book.n_visits(it.row) > 0]
    counts["measured"] = len(measured)
    counts["skipped"] = len(todo) - len(measured)
    book.close()
    return counts
