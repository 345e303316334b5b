"""Accuracy report: +-10% accuracy and MAPE per processor and op kind, and per kernel (processor,
op, algorithm), size, prediction time; the kernels trained on too few samples."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from codl_tvm.predictor.base import BasePredictor, sub_spec
from codl_tvm.predictor.opspec import SHARING_KINDS, OpSpec


def split_rows(
    rows: Sequence[dict[str, Any]], test_size: float = 0.3, seed: int = 0
) -> tuple[list[dict], list[dict]]:
    """Random train/test split of sample rows (``test_size`` held out)."""
    rng = np.random.default_rng(seed)
    test = rng.random(len(rows)) < test_size
    train = [r for r, t in zip(rows, test, strict=True) if not t]
    return train, [r for r, t in zip(rows, test, strict=True) if t]


def split_models(
    rows: Sequence[dict[str, Any]], test_models: Sequence[str]
) -> tuple[list[dict], list[dict]]:
    """Train on every CNN (and the random/sharing rows) but ``test_models``; test on those."""
    held = set(test_models)
    return [r for r in rows if r["model"] not in held], [r for r in rows if r["model"] in held]


def _stats(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    err = np.abs(pred - meas) / meas
    # the median of measured / predicted tells a bias (one factor off) from scatter
    ratio = float(np.median(meas / np.maximum(pred, 1e-9)))
    return {"n": int(len(meas)), "acc10": float(np.mean(err <= 0.1)), "mape": float(np.mean(err)),
            "median_ratio": ratio}


def predict_time_us(predictor: BasePredictor, ops: Sequence[OpSpec], repeat: int = 3) -> float:
    """Median microseconds of one ``predict_op`` call (OC split at 0.5, no chain).

    Every repeat gets fresh copies of the ops, so nothing an OpSpec caches is reused.
    """
    if not ops:
        return float("nan")
    best = []
    for _ in range(repeat):
        fresh = [OpSpec.from_json(op.to_json()) for op in ops]
        t0 = time.perf_counter()
        for op in fresh:
            predictor.predict_op(op, "OC", 0.5)
        best.append((time.perf_counter() - t0) / len(ops) * 1e6)
    return float(np.median(best))


def accuracy_rows(
    predictor: BasePredictor,
    rows: Sequence[dict[str, Any]],
    predicted_us: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """One row per (processor, op) plus ``all`` per processor; compute and sharing samples.

    ``predicted_us``: the predictor's latencies of ``rows`` when already computed.
    """
    pred = predictor.predict(rows) if predicted_us is None else np.asarray(predicted_us)
    meas = np.array([r["latency_us"] for r in rows])
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r["role"], r["op"])].append(i)
        if r["op"] not in SHARING_KINDS:
            groups[(r["role"], "all")].append(i)
    out = []
    for (role, op), idx in sorted(groups.items()):
        out.append({"processor": role, "op": op, **_stats(pred[idx], meas[idx])})
    return out


# a kernel (processor, op, algorithm) trained on fewer sample rows than this is flagged
MIN_KERNEL_SAMPLES: int = 10


def kernel_rows(
    predictor: BasePredictor,
    rows: Sequence[dict[str, Any]],
    predicted_us: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """Accuracy per kernel: one row per (role, op, algorithm) present in the sample rows.

    Sharing ops (``to_cpu``, ``slice``, ...) count as kernels too, under the algorithm their
    rows record (``copy``).

    Parameters
    ----------
    predictor : BasePredictor
        A fitted predictor.
    rows : sequence of dict
        Sample rows (``role``, ``op``, ``algorithm``, ``latency_us`` and the shape columns).
    predicted_us : numpy.ndarray, optional
        The predictor's latencies of ``rows`` in microseconds, when already computed.

    Returns
    -------
    list of dict
        Sorted by (processor, op, algorithm), each with ``processor`` (the row's role),
        ``op``, ``algorithm``, ``n`` (rows), ``acc10`` (fraction of rows predicted within
        +-10% of the measured latency), ``mape`` (mean absolute error over the measured
        latency, a fraction) and ``median_ratio`` (the median of measured / predicted: a
        kernel priced one factor off has it far from 1 whatever its scatter).
    """
    pred = predictor.predict(rows) if predicted_us is None else np.asarray(predicted_us)
    meas = np.array([r["latency_us"] for r in rows])
    groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r["role"], r["op"], str(r["algorithm"]))].append(i)
    return [
        {"processor": role, "op": op, "algorithm": algo, **_stats(pred[idx], meas[idx])}
        for (role, op, algo), idx in sorted(groups.items())
    ]


def few_sample_kernels(
    kernels: Sequence[dict[str, Any]], min_samples: int = MIN_KERNEL_SAMPLES
) -> list[str]:
    """Warning messages, one per kernel with fewer than ``min_samples`` sample rows.

    Parameters
    ----------
    kernels : sequence of dict
        Rows of :func:`kernel_rows` (``processor``, ``op``, ``algorithm``, ``n``).
    min_samples : int
        The fewest sample rows a kernel's model should rest on.

    Returns
    -------
    list of str
        One line each, naming the kernel (``processor op/algorithm``) and its row count, in
        the order of ``kernels``.
    """
    return [
        f"{k['processor']} {k['op']}/{k['algorithm']} has {k['n']} "
        f"sample{'' if k['n'] == 1 else 's'} (< {min_samples}): its predictions rest on few "
        "measurements; profile more shapes that run it"
        for k in kernels
        if k["n"] < min_samples and k["op"] != "sync"  # one probe of no size: not a model
    ]


def report(
    predictor: BasePredictor, rows: Sequence[dict[str, Any]], n_timed: int = 200
) -> dict[str, Any]:
    """The full report of a predictor on sample rows.

    Parameters
    ----------
    predictor : BasePredictor
        A fitted predictor.
    rows : sequence of dict
        Sample rows of the predictor's device pair.
    n_timed : int
        How many compute rows' ops time ``predict_op``.

    Returns
    -------
    dict
        ``kind``, ``pair``, ``size_bytes``, ``predict_us_per_op``, ``rows`` (per processor and
        op, :func:`accuracy_rows`) and ``kernels`` (per processor, op and algorithm,
        :func:`kernel_rows`).
    """
    comp = [r for r in rows if r["op"] not in SHARING_KINDS]
    ops = _full_ops(comp[:n_timed])
    predicted_us = predictor.predict(rows)
    return {
        "kind": predictor.kind,
        "pair": predictor.pair_,
        "size_bytes": predictor.size_bytes,
        "predict_us_per_op": predict_time_us(predictor, ops),
        "rows": accuracy_rows(predictor, rows, predicted_us),
        "kernels": kernel_rows(predictor, rows, predicted_us),
    }


def _full_ops(rows: Sequence[dict[str, Any]]) -> list[OpSpec]:
    """The unsplit ops behind sample rows (OC-splittable ones), to time ``predict_op``."""
    ops = []
    for r in rows:
        pad = r["padding"].split(":")
        full = {"sub_H": r["H"], "sub_W": r["W"], "sub_IC": r["IC"], "sub_OC": r["OC"]}
        full.update(sub_pad_top=int(pad[0]), sub_pad_bottom=int(pad[2]))
        spec = sub_spec({**r, **full})
        ops.append(spec)
    return ops


def format_kernel_table(kernels: Sequence[dict[str, Any]]) -> str:
    """The rows of :func:`kernel_rows` as a text table.

    Parameters
    ----------
    kernels : sequence of dict
        Rows of :func:`kernel_rows`.

    Returns
    -------
    str
        A header and one line per kernel: processor, op, algorithm, n, acc10 and MAPE (both
        in percent), and the median of measured / predicted.
    """
    width = max([len("algorithm"), *(len(k["algorithm"]) for k in kernels)])
    lines = [f"{'processor':<9} {'op':<12} {'algorithm':<{width}} {'n':>5} {'acc10':>7} "
             f"{'MAPE':>7} {'meas/pred':>9}"]  # fmt: skip
    for k in kernels:
        lines.append(
            f"{k['processor']:<9} {k['op']:<12} {k['algorithm']:<{width}} {k['n']:>5} "
            f"{k['acc10']:>7.1%} {k['mape']:>7.1%} {k['median_ratio']:>9.2f}"
        )
    return "\n".join(lines)


def format_table(rep: dict[str, Any]) -> str:
    lines = [
        f"predictor {rep['kind']} ({rep['pair']}): {rep['size_bytes']} bytes, "
        f"{rep['predict_us_per_op']:.1f} us per predict_op",
        f"{'processor':<9} {'op':<12} {'n':>5} {'acc10':>7} {'MAPE':>7}",
    ]
    for r in rep["rows"]:
        lines.append(
            f"{r['processor']:<9} {r['op']:<12} {r['n']:>5} {r['acc10']:>7.1%} {r['mape']:>7.1%}"
        )
    return "\n".join(lines)
