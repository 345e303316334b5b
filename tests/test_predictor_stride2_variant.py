"""1x1 convs at stride 2 have their own codl models (``blocking.variant``: ``k1s2``).

The H100 training file holds a ``downsample`` stratum of them. The 1x1 stride-2 rows of the
deep, deep2 and body strata (``tests/data/samples-h100-strata-k1s2.csv``, copied from the
predictor's test strata) are never trained on: they test those models blind.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from codl_tvm.predictor import DATA_DIR, load
from codl_tvm.predictor.blocking import variant
from codl_tvm.predictor.codl import AlgorithmFallbackWarning
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.profiler import read_samples

STRATA_K1S2 = Path(__file__).parent / "data" / "samples-h100-strata-k1s2.csv"
FORMAT1 = Path(__file__).parent / "data" / "predictor-x86-cuda-format1.json"
SHORTCUT = OpSpec("conv2d", 56, 56, 256, 512, 1, 1, 2, 2)  # ResNet-50's first shortcut


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return read_samples(DATA_DIR / "samples-x86-cuda-h100.csv")


@pytest.fixture(scope="module")
def shipped():
    return load(DATA_DIR / "predictor-x86-cuda.json")


def test_a_1x1_window_at_stride_2_is_its_own_variant() -> None:
    assert variant(SHORTCUT) == "k1s2"
    assert variant(OpSpec("conv2d", 56, 56, 256, 512, 1, 1)) == "k1"
    assert variant(OpSpec("conv2d", 56, 56, 256, 512, 3, 3, 2, 2, (1, 1, 1, 1))) == "kn"


def test_the_shipped_predictor_has_stride_2_models(shipped) -> None:
    for role, algo in (("cpu", "direct-nchwc"), ("gpu", "gpu-conv-tiled")):
        assert f"{role}/conv2d/{algo}/k1s2" in shipped.t_
    with warnings.catch_warnings():
        warnings.simplefilter("error", AlgorithmFallbackWarning)
        assert shipped.kernel_us("cpu", SHORTCUT) > 0 and shipped.kernel_us("gpu", SHORTCUT) > 0


def test_a_file_without_them_predicts_with_the_1x1_model_and_says_why() -> None:
    """The old format-1 file loads; its 1x1 stride-2 predictions are what they were
    (its 1x1 model), with one warning naming the missing samples."""
    old = load(FORMAT1)
    assert "cpu/conv2d/direct-nchwc/k1s2" not in old.t_
    with pytest.warns(AlgorithmFallbackWarning, match="no 1x1 stride-2 conv: profile with --down"):
        us = old.kernel_us("cpu", SHORTCUT)
    assert us == pytest.approx(old._kernel_us("cpu", SHORTCUT, None))
    with warnings.catch_warnings():
        warnings.simplefilter("error", AlgorithmFallbackWarning)
        old.kernel_us("cpu", SHORTCUT)  # once per model
    key = old._fallback_key("gpu/conv2d/gpu-conv-tiled/k1s2")
    assert key == "gpu/conv2d/gpu-conv-tiled/k1"  # not the first name in order ("direct")


def test_format_2_is_format_1_grouped_without_losing_a_digit(rows, tmp_path) -> None:
    """Format 2: one range entry for roles of one range, models grouped by role, no trailing
    zero units, floats in their shortest text. The old default (format 1) saved again
    predicts every row exactly as it did. (Re-saved rather than re-trained: a model fitted by
    today's terms differs from that file's for reasons other than its format.)"""
    before = [r for r in rows if r["model"] != "random-downsample"]
    path = tmp_path / "p.json"
    load(FORMAT1).save(path)
    doc = json.loads(path.read_text())
    assert doc["version"] == 2  # a format-1 file saved again: format 2 (tied units stored)
    assert list(doc["range"]) == ["gpu,cpu"] and set(doc["model"]["t"]) == {"cpu", "gpu"}
    assert "family" not in doc["model"] and "0.000" not in path.read_text()
    assert doc["model"]["t"]["cpu"]["conv2d/direct-nchwc/k1"][-1] != 0
    new, old = load(path), load(FORMAT1)
    assert new.range_ == old.range_ and new.family_ == old.family_
    np.testing.assert_array_equal(new.predict(before), old.predict(before))
    assert len(path.read_text()) < len(FORMAT1.read_text())


def _stride2_rows(role: str) -> list[dict]:
    return [r for r in read_samples(STRATA_K1S2) if r["role"] == role
            and r["KH"] * r["KW"] == 1 and r["SH"] == 2]  # fmt: skip


@pytest.mark.parametrize(("role", "before", "floor"), [("cpu", 0.20, 0.58), ("gpu", 0.53, 0.72)])
def test_strata_stride_2_rows_never_trained_on(shipped, role: str, before: float,
                                               floor: float) -> None:
    """Regression: the three strata's 1x1 stride-2 rows were within +-10% for
    20% (CPU, median 0.74x) and 53% (GPU) predicted by the 1x1 models; by their own
    models, trained on the downsample stratum: 60% and 81%. With the sampled pad pass
    (every such row measured again): CPU 56%, 61% with the stride-1 L1-spill unit tied in
    (``ties.TIED_VARIANT_UNITS``); the body stratum's big planes stay at 38% (1.12x).
    With the panel and written-bytes terms: 59%."""
    test = _stride2_rows(role)
    assert len(test) >= 230
    ratio = np.array(shipped.predict(test)) / np.array([r["latency_us"] for r in test])
    assert np.mean(np.abs(ratio - 1.0) <= 0.1) >= floor > before
    assert 0.9 <= np.median(ratio) <= 1.1


def test_a_1x1_stride_2_shape_left_out_is_predicted_from_the_others(rows) -> None:
    """Regression: each 1x1 stride-2 shape of the training file predicted by a
    fit without its rows. Without the 1x1 models' weight-panel term 67% of the rows fell
    within +-10%; with it, 76%."""
    from codl_tvm.predictor import make

    mine = [r for r in rows if r["role"] == "cpu" and r["algorithm"] == "direct-nchwc"
            and r["KH"] * r["KW"] == 1 and r["SH"] == 2]  # fmt: skip
    shapes = sorted({(r["H"], r["W"], r["IC"], r["OC"]) for r in mine})
    assert len(shapes) == 24
    hits = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for shape in shapes:
            out = [r for r in mine if (r["H"], r["W"], r["IC"], r["OC"]) == shape]
            left = {id(r) for r in out}
            pred = make("codl").fit([r for r in rows if id(r) not in left])
            y = np.array([r["latency_us"] for r in out])
            hits.extend(np.abs(np.array(pred.predict(out)) / y - 1.0) <= 0.1)
    assert np.mean(hits) >= 0.72
