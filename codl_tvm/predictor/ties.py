"""Units a codl model takes from another fitted model instead of fitting them.

A term whose regime the training file reaches in one CNN only, or not at all, cannot be
learned: the fit sets its unit to 0 and the layers in that regime lose the term. Where the
term is a pass of a kind another kernel's model already prices, its unit is taken from that
model.

A tied unit is not stored: a predictor file holds 0 in its column (trailing zeros are left
out), and loading derives it again from the source model, as the fit did.

Ties name terms (``blocking.TERM_NAMES``), not columns: the tied term of a model and the
source model's units a tie reads are looked up by name, so reordering a term list (with its
names) keeps every tie.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from codl_tvm.predictor.blocking import TERM_NAMES, term_column

TIES_DERIVED_FROM = 3  # the predictor file format that stops storing tied units

Units = Mapping[str, float] | None  # a source model's units by term name (None: no such model)


def streamed_byte_us(eltwise: Units) -> float:
    """Time per byte per core of a parallel pass past the caches, from the fitted elementwise
    model (``cpu_stream_terms.cpu_eltwise``): its per-element unit over the 8 bytes an
    element's pass counts, plus its streamed-byte unit. 0 without such a model (a quick
    profile), with a recorded one, or one whose file trimmed the streamed-byte unit."""
    if not eltwise or "streamed_bytes" not in eltwise:
        return 0.0
    return eltwise["row_elements"] / 8 + eltwise["streamed_bytes"]


def streamed_extra_byte_us(eltwise: Units) -> float:
    """What a byte of a parallel pass costs per core past the caches on top of its in-cache
    time: the elementwise model's streamed-byte unit alone (its per-element unit prices the
    pass in cache, as a kernel's own pass units do). 0 as :func:`streamed_byte_us`."""
    if not eltwise or "streamed_bytes" not in eltwise:
        return 0.0
    return eltwise["streamed_bytes"]


class Tie(NamedTuple):
    """Term ``term`` of a model takes ``unit(<role>/<source> model's units, by name)``."""

    term: str
    source: str
    unit: Callable[[Units], float | None]  # None: no such source, the term is fitted instead


def k1_weight_pack_us(k1s2: Units) -> float | None:
    """The 1x1 stride-2 direct-conv model's weight-pack unit, for the 1x1 GEMM's pack.

    Both kernels pack an OC x IC weight into OC-blocked panels on every call, one parallel
    (block, input channel) loop gathering a float from each weight row (rows IC floats
    apart). Fitted in-sample the two units agree within 7% (0.99 and 0.93 ns a float per core;
    a separate timing put the GEMM's at ~1.2). But only YOLO-V2's 13x13 x1024 rows weigh the GEMM's
    pack, so held out its fit set 2.35 ns and those rows ran 0.6-0.9x their predictions. The
    stride-2 rows, small outputs of wide weights, set the unit on their own. None
    without that model (a profile without ``--downsample``): the GEMM fits its own."""
    if not k1s2 or "weight_pack" not in k1s2:
        return None
    return float(k1s2["weight_pack"])


# (family, algorithm) -> its ties. The CPU Winograd weight transform's bytes beyond the L2s
# (``cpu_passes.winograd_streamed_bytes``) stream as an elementwise pass's do; the H100 file has
# them only in YOLO-V2's 13x13 x1024 layers. Tied, those layers' held-out row splits go from
# 0.43-0.81x to 0.95-1.07x of their times; fitted on the whole file, no prediction moves by
# more than 1%.
# The 1x1 GEMM's call beyond the L2s (``cpu_passes.gemm_pass_bytes``: its pack and unpack
# passes, priced in cache by their own units) adds the streamed-byte unit alone; fitted, it
# was 0.
# The direct conv's bytes written beyond the L2s (``cpu_passes.direct_written_bytes``, its last
# term) likewise; every filter-size variant's model takes it.
# The 1x1 GEMM's weight pack takes the 1x1 stride-2 direct conv's (:func:`k1_weight_pack_us`).
TIED_UNITS: dict[tuple[str, str], tuple[Tie, ...]] = {
    ("cpu", "winograd-2x2-3x3"): (
        Tie("weight_transform_streamed", "elementwise/parallel-loops", streamed_byte_us),),
    ("cpu", "gemm-1x1"): (Tie("past_l2s", "elementwise/parallel-loops", streamed_extra_byte_us),
                          Tie("weight_pack", "conv2d/direct-nchwc/k1s2", k1_weight_pack_us)),
    ("cpu", "direct-nchwc"): (
        Tie("written_past_l2s", "elementwise/parallel-loops", streamed_extra_byte_us),),
}

# The direct conv's weight loads once a task's packed panel spills L1 (``cpu_terms.cpu_conv``'s
# ``l1_spill`` term). A 1x1 window at stride 2 runs the stride-1
# 1x1 hot loop over its sampled copy, so its model takes the stride-1 model's unit. Fitted on
# its 24 shapes alone the unit came out 5x the stride-1 one and stood in for other costs. Tied,
# the deep strata's 1x1 stride-2 rows (never trained on; IC 448-3650, whose panels spill) go
# from 65 to 71% within +-10%, all 236 strata rows from 55.5 to 60.6%, leave one shape out from
# 63.5 to 64.9%; the split's 1x1 stride-2 rows from 71.9 to 71.5% (PREDICTOR.md)


def stride1_l1_spill_us(k1: Units) -> float:
    """The stride-1 1x1 direct-conv model's L1-spill unit; 0 without one (or a recorded one)."""
    if not k1 or "l1_spill" not in k1:
        return 0.0
    return float(k1["l1_spill"])


# (family, algorithm, filter-size variant) -> its ties, beside its algorithm's :data:`TIED_UNITS`
TIED_VARIANT_UNITS: dict[tuple[str, str, str], tuple[Tie, ...]] = {
    ("cpu", "direct-nchwc", "k1s2"): (Tie("l1_spill", "conv2d/direct-nchwc/k1",
                                          stride1_l1_spill_us),),
}


def ties_of(key: str, family: Mapping[str, str]) -> list[Tie]:
    """The ties of model ``key`` (``role/kind/algorithm[/variant]``): its filter-size variant's
    (:data:`TIED_VARIANT_UNITS`) and its algorithm's (:data:`TIED_UNITS`)."""
    role, _, algo, *variant = key.split("/")
    fam = family[role]
    by_variant = TIED_VARIANT_UNITS.get((fam, algo, *variant), ()) if variant else ()
    return [*by_variant, *TIED_UNITS.get((fam, algo), ())]


def named_units(family: str, source: str, units: Any) -> dict[str, float] | None:
    """A model's units by term name (``source``: ``kind/algorithm[/variant]``); None for a
    missing or recorded-blocking model. A file's trimmed list names only the units it has."""
    if not isinstance(units, list):
        return None
    names = TERM_NAMES[(family, source.split("/")[1])]
    return dict(zip(names, units, strict=False))


def tied_units(key: str, family: Mapping[str, str], models: Mapping[str, Any]
               ) -> dict[int, float]:
    """Column -> unit of each tie of ``key``, from ``models`` (those fitted or loaded so far).
    A tie whose source is missing and has no default (unit None) is left out: its column is
    fitted."""
    role, _, algo = key.split("/")[:3]
    fam = family[role]
    units = {term_column(fam, algo, tie.term):
             tie.unit(named_units(fam, tie.source, models.get(f"{role}/{tie.source}")))
             for tie in ties_of(key, family)}  # fmt: skip
    return {col: unit for col, unit in units.items() if unit is not None}


def tie_column(family: str, algorithm: str, tie: Tie) -> int:
    """The column of the model's terms that ``tie`` sets."""
    return term_column(family, algorithm, tie.term)


def tie_order(keys: Iterable[str], family: Mapping[str, str]) -> list[str]:
    """``keys`` sorted, each model after the models among them it takes a unit from."""
    left, done = sorted(keys), []
    while left:
        ready = [k for k in left if all(
            f"{k.split('/')[0]}/{t.source}" not in left for t in ties_of(k, family))]
        if not ready:
            raise ValueError(f"tied units form a cycle among {left}")
        done += ready
        left = [k for k in left if k not in ready]
    return done


def untied(units: Any, tied: Mapping[int, float]) -> Any:
    """``units`` as a format-3 file stores them: 0 in each tied column (a recorded-blocking
    model, a dict, as it is)."""
    if not isinstance(units, list):
        return units
    return [0.0 if j in tied else u for j, u in enumerate(units)]


def retied(units: Any, tied: Mapping[int, float]) -> Any:
    """Loaded ``units`` with the tied columns set (a trimmed list grows to reach them)."""
    if not tied or not isinstance(units, list):
        return units
    out = list(units) + [0.0] * (max(tied) + 1 - len(units))
    for col, unit in tied.items():
        out[col] = unit
    return out
