"""Latency predictors of the CoDL kind (MobiSys'22 section 5) and their baselines.

Kinds: ``codl`` (Eq. 3 blocking counts x learned basic-unit time + sharing costs), ``flops``
(muLayer), ``eop`` (VEE'22 patterns), ``gbdt`` (boosted trees, comparator). All are
scikit-learn estimators fitted on profiler sample rows, saved as plain JSON. The rows come from
:func:`codl_tvm.profiler.read_samples`: the profiler owns the samples file and imports this
package (its op specs), so this package imports nothing of the profiler.

>>> from codl_tvm.profiler import read_samples  # doctest: +SKIP
>>> p = train(read_samples("samples.csv"), kind="codl")  # doctest: +SKIP
>>> p.save("predictor.json"); p = load("predictor.json")  # doctest: +SKIP
>>> op = OpSpec("conv2d", 56, 56, 64, 64, 3, 3, pad=(1, 1, 1, 1))
>>> p.predict_op(op, "H", 0.7)  # doctest: +SKIP
{'cpu_us': ..., 'gpu_us': ..., 'share_us': ..., 'total_us': ...}
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from codl_tvm.predictor.base import BasePredictor

KINDS: tuple[str, ...] = ("codl", "flops", "eop", "gbdt")

# public name -> submodule, loaded on first use (scikit-learn takes a second to import, and
# the command line's --help must not wait for it)
_LAZY = {
    "FORMAT_VERSION": "base", "BasePredictor": "base", "OutOfRangeWarning": "base",
    "PredictorFileError": "base", "PairMismatchError": "base", "PairMismatchWarning": "base",
    "load": "base", "EOPPredictor": "baselines",
    "FlopsPredictor": "baselines", "CoDLPredictor": "codl", "GBDTPredictor": "gbdt",
    "OpSpec": "opspec",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "FORMAT_VERSION", "KINDS", "BasePredictor", "CoDLPredictor", "EOPPredictor",
    "FlopsPredictor", "GBDTPredictor", "OpSpec", "OutOfRangeWarning", "PairMismatchError",
    "PairMismatchWarning", "PredictorFileError",
    "default_for", "load", "make", "report", "train",
]  # fmt: skip


def make(kind: str, **params: Any) -> BasePredictor:
    """An unfitted predictor of ``kind``."""
    from codl_tvm.predictor.base import registry

    kinds = registry()
    if kind not in kinds:
        raise ValueError(f"unknown predictor kind {kind!r}; known: {list(KINDS)}")
    return kinds[kind](**params)


def train(
    samples: Sequence[dict[str, Any]],
    kind: str = "codl",
    output: str | Path | None = None,
    machine: dict[str, Any] | None = None,
    source: str | Path | None = None,
    **params: Any,
) -> BasePredictor:
    """Fit a predictor of ``kind`` on sample rows; save it when ``output`` is given.

    Parameters
    ----------
    samples : list of dict
        Sample rows of one device pair (:func:`codl_tvm.profiler.read_samples` reads a
        samples CSV).
    kind : str
        One of :data:`KINDS`.
    output : path, optional
        Predictor JSON to write.
    machine : dict, optional
        Facts of the machine the samples were profiled on
        (:func:`codl_tvm.profiler.machine_facts.beside` reads those the profiler wrote beside
        a samples CSV).
    source : path, optional
        The samples file the rows came from: its name is stored in the predictor
        (``trained_on``) and ``output`` may not overwrite it.
    **params
        Estimator parameters of ``kind``.
    """
    rows = list(samples)
    predictor = make(kind, **params).fit(rows, machine=machine)
    if source is not None:  # provenance travels in the JSON file
        # the command is not stored: kind and samples give it (``train_command``; 2 KB files)
        predictor.trained_on_ = {"samples": Path(source).name, "rows": len(rows)}
    if output is not None:
        predictor.save(output, inputs=(source,) if source is not None else ())
    return predictor


def report(
    predictor: str | Path | BasePredictor,
    samples: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """Accuracy (+-10%, MAPE) per processor and op kind and per kernel, size and prediction time.

    ``samples`` are rows of the predictor's device pair (``read_samples(path, pair=...)``
    refuses another pair's). The dict's ``rows`` score each (processor, op kind), its
    ``kernels`` each (processor, op kind, algorithm) of the samples
    (:func:`codl_tvm.predictor.accuracy.kernel_rows`).
    """
    from codl_tvm.predictor.accuracy import report as _report
    from codl_tvm.predictor.base import load

    pred = load(predictor) if isinstance(predictor, (str, Path)) else predictor
    return _report(pred, list(samples))


DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def default_for(pair: Any) -> BasePredictor | None:
    """The predictor shipped with the package for ``pair`` (a name or a ``DevicePair``).

    Returns ``None`` for pairs without one (profile and ``codl-tvm train`` your own).
    ``codl_tvm/data/predictor-x86-cuda.json`` was trained on the H100 machine's samples
    (``codl_tvm/data/samples-x86-cuda-h100.csv``; its ``trained_on`` field says how).
    """
    name = pair if isinstance(pair, str) else getattr(pair, "name", None)
    if not name:
        raise ValueError(f"not a device pair or pair name: {pair!r}")
    from codl_tvm.predictor.base import load

    path = DATA_DIR / f"predictor-{name}.json"
    return load(path) if path.is_file() else None
