"""``codl-tvm explain``: the per-op table of a plan and its timeline picture."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from . import Command, parse_shapes

PLOT_HINT = "matplotlib is not installed (pip install 'codl-tvm[plot]')"


def _add(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX file, or a zoo model name (e.g. tiny-cnn, resnet-18)")
    p.add_argument("--pair", help="device pair (default: the predictor's pair, else auto)")
    p.add_argument("--arch", help="CUDA arch such as sm_90 (detected when omitted)")
    p.add_argument("--plan", required=True, help="plan JSON (from `codl-tvm plan`)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--predictor", help="predictor JSON (from `codl-tvm train`) for the times")
    how.add_argument("--measure", action="store_true",
                     help="compile and time every (sub-)op alone on the pair (slower)")
    p.add_argument("--repeat", type=int, default=10, help="timings per op with --measure")
    p.add_argument("--png", metavar="FILE", help="draw the timeline to FILE (.png/.svg/.pdf)")
    p.add_argument("--shape", action="append", help="input shape override NAME=D1,D2,...")
    p.add_argument("--batch", type=int, help="batch size (first dim of every input)")
    p.add_argument("--json", action="store_true", help="print rows and totals as JSON")


def load_any_model(model: str, batch: int | None = None,
                   shapes: dict[str, list[int]] | None = None):
    """An ONNX file or a zoo model as a prepared Relax module, with batch/shape overrides."""
    from .. import load_model, zoo
    from ..frontend import ModelError

    path = Path(model)
    if path.suffix != ".onnx" and not path.exists():
        try:
            path = zoo.resolve(model, batch=batch or 1)
        except ValueError as err:
            raise ModelError(str(err)) from None
    elif batch:
        shapes = {**batch_shapes(path, batch), **(shapes or {})}
    return load_model(path, shape=shapes)


def batch_shapes(path: str | Path, batch: int) -> dict[str, list[int]]:
    """Input shape overrides that set the first dimension of every input of an ONNX file."""
    import onnx

    from ..frontend import ModelError

    if batch < 1:
        raise ModelError(f"--batch must be at least 1, got {batch}")
    if not Path(path).exists():
        raise ModelError(f"model file {path} does not exist")
    graph = onnx.load(str(path), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    return {inp.name: [batch, *(d.dim_value for d in inp.type.tensor_type.shape.dim[1:])]
            for inp in graph.input if inp.name not in inits}


def _costs(args: argparse.Namespace):
    from ..device import DevicePair
    from ..explain import FlopsCosts, MeasuredCosts, PredictorCosts

    if args.predictor:
        from ..predictor import load

        pred = load(args.predictor)
        if args.pair and args.pair != pred.pair_:
            warnings.warn(f"the predictor was trained on pair {pred.pair_!r}, not {args.pair!r}",
                          stacklevel=2)
        return PredictorCosts(pred, Path(args.predictor).name), pred.pair_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # auto's fallback shows in the pair name
        pair = DevicePair.parse(args.pair or "auto", arch=args.arch)
    return (MeasuredCosts(pair, repeat=args.repeat) if args.measure else FlopsCosts()), pair.name


def _run(args: argparse.Namespace) -> int:
    from ..explain import explain
    from ..plan import Plan

    mod = load_any_model(args.model, args.batch, parse_shapes(args.shape))
    plan = Plan.load(args.plan)
    costs, pair_name = _costs(args)
    result = explain(mod, plan, costs)
    tl = result.timeline
    if args.json:
        print(json.dumps({"rows": result.rows, "source": result.source, "unit": result.unit,
                          "coexec": tl.coexec_us, "share": tl.share_us,
                          "cpu_only": tl.cpu_only_us, "gpu_only": tl.gpu_only_us,
                          "notes": result.notes}, indent=1))  # fmt: skip
    else:
        print(f"{Path(args.model).stem} on {pair_name}, plan {args.plan}")
        print(result.table())
        print(result.summary())
        for note in result.notes:
            print(f"note: {note}")
    if args.png:
        _draw(result, args.png, f"{Path(args.model).stem} on {pair_name}")
    return 0


def _draw(result, png: str, what: str) -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"no timeline drawn: {PLOT_HINT}; the table above is all", file=sys.stderr)
        return
    from ..timeline import draw

    tl = result.timeline
    split = sum(r["place"] == "split" for r in result.rows)
    title = f"{what}: {split}/{len(result.rows)} ops split. Times {result.source}\n" + (
        result.summary().splitlines()[-1])
    print(f"timeline: {draw(tl, png, title=title, unit=result.unit)}")


COMMANDS = {
    "explain": Command("per-op table of a plan (dim, ratio, chain, CPU/GPU/sharing time) and "
                       "its timeline picture", _add, _run),
}
