"""benchmarks/term_trials.py: a trial changes the 1x1 stride-2 direct conv's terms and nothing
else, and leaves the library's terms as they were."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import load_benchmark

from codl_tvm.predictor import DATA_DIR, blocking
from codl_tvm.predictor.mirror import Machine
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.profiler import read_samples

trials = load_benchmark("term_trials")
M = Machine()
K1S2 = OpSpec("conv2d", 17, 17, 224, 160, 1, 1, 2, 2)
K1 = OpSpec("conv2d", 17, 17, 224, 160, 1, 1, 1, 1)
K3 = OpSpec("conv2d", 17, 17, 224, 160, 3, 3, 1, 1, (1, 1, 1, 1))
BASE = blocking.TERMS[trials.KEY]


def test_the_library_terms_come_back_after_a_trial_even_one_that_fails():
    with pytest.raises(RuntimeError), trials.installed(trials.TRIALS["waves"]):
        assert blocking.TERMS[trials.KEY] is not BASE
        raise RuntimeError
    assert blocking.TERMS[trials.KEY] is BASE


def test_a_term_is_added_for_1x1_stride_2_only():
    trial = trials.TRIALS["step lines"]
    with trials.installed(trial):
        got = {s: blocking.TERMS[trials.KEY](s, M) for s in (K1S2, K1, K3)}
    tiles = trials.Tiles.of(K1S2, M)
    assert got[K1S2] == BASE(K1S2, M) + [tiles.waves * 224 * tiles.step_lines]
    assert got[K1S2][-1] > 0
    for s in (K1, K3):
        assert got[s] == BASE(s, M) + [0.0]


def test_a_drop_zeroes_its_slot_for_1x1_stride_2_only():
    with trials.installed(trials.TRIALS["no L1 spill term"]):
        got, other = blocking.TERMS[trials.KEY](K1S2, M), blocking.TERMS[trials.KEY](K1, M)
    want = BASE(K1S2, M)
    want[5] = 0.0
    assert got == want + [0.0] and other == BASE(K1, M) + [0.0]


def test_tiles_follow_the_kernel():
    """17x17 at stride 2: 9 output columns in one tile, whose inputs are 9 adjacent floats of
    the 9x9 sampled copy (1 line; 17 floats, 2 lines, of the 17x17 copy before session 17)."""
    from codl_tvm import tiling
    from codl_tvm.predictor.mirror import conv_shape

    g = trials.Tiles.of(K1S2, M)
    assert (g.x_tile, g.vecs, g.step_lines, g.plane_bytes) == (9, 2, 1, 9 * 9 * 4)
    assert g.tasks == tiling.direct_tasks(conv_shape(K1S2), M)
    assert g.waves == -(-g.tasks // M.cores)


def test_the_baseline_predicts_as_the_library_does():
    rows = read_samples(DATA_DIR / "samples-x86-cuda-h100.csv")[::3]
    cpu = [r for r in rows if r["role"] == "cpu"]
    with trials.installed(None):
        got = trials._fit(rows).predict(cpu)
    np.testing.assert_allclose(got, trials._fit(rows).predict(cpu), rtol=1e-9)


def test_an_unknown_trial_is_one_clear_error(capsys):
    with pytest.raises(SystemExit) as err:
        trials.main([str(DATA_DIR / "samples-x86-cuda-h100.csv"), "--only", "no such term"])
    assert err.value.code == 2 and "no trials named ['no such term']" in capsys.readouterr().err


def test_a_trial_is_scored_against_the_baseline(tmp_path, capsys):
    """One seed on a third of the file: the table has the baseline and the trial, and the
    JSON names the trial's verdict (no timing, no figure asserted)."""
    import json

    from helpers import ROOT

    small = tmp_path / "small.csv"
    lines = (DATA_DIR / "samples-x86-cuda-h100.csv").read_text().splitlines(keepends=True)
    small.write_text("".join(lines[:1] + lines[1::3]))
    blind = ROOT / "benchmarks" / "results" / "body-h100" / "body-samples.csv"
    out = tmp_path / "t.json"
    assert trials.main([str(small), "--seeds", "1", "--only", "waves", "--blind", str(blind),
                        "--json", str(out)]) == 0  # fmt: skip
    got = json.loads(out.read_text())
    assert set(got["trials"]) == {"waves"} and isinstance(got["trials"]["waves"]["both_up"], bool)
    assert all(0 <= got["baseline"][k] <= 1 for k in ("split", "loso", "blind", "yolo"))
    assert "| (none) |" in capsys.readouterr().out
    assert blocking.TERMS[trials.KEY] is BASE


def test_the_uncapped_panel_trial_replaces_the_capped_slot():
    """Session 18: the 1x1 models count a panel up to an L1 (12288 floats); the trial counts
    it whole. 13x13 715->457 at stride 2: 15 channel blocks x 7 rows, chunks of 7 tasks
    (one block each), panels of 32 x 715 floats."""
    s = OpSpec("conv2d", 13, 13, 715, 457, 1, 1, 2, 2)
    with trials.installed(trials.TRIALS["panels uncapped"]):
        got = blocking.TERMS[trials.KEY](s, M)
    base = BASE(s, M)
    assert base[trials.PANEL_SLOT] == 12288
    assert got[trials.PANEL_SLOT] == 0.0 and got[-1] == 32 * 715
    assert got[: trials.PANEL_SLOT] == base[: trials.PANEL_SLOT]
