"""The adaptive guard: a guarded artifact keeps choosing its fastest alternative call after
call (codl_tvm.adaptive_guard). The chooser's policy on recorded latencies; the runner on a real
guarded cpu-pair artifact, in this process and through the CLI."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import conv, single_function
from tvm.relax import op as rop

import codl_tvm
from codl_tvm import Plan, runtime
from codl_tvm.adaptive_guard import AdaptiveRunner, Chooser, Policy
from codl_tvm.cli import main as cli_main

PAIR = codl_tvm.DevicePair.preset("cpu-pair")
MS = 1e-3


# ---- the policy ------------------------------------------------------------------------------
def calls(chooser: Chooser, n: int, latency_s: dict[str, float]) -> list[str]:
    """Run ``n`` calls, each taking its alternative's ``latency_s``; the names run."""
    return chooser.replay(latency_s, n)


FREE = frozenset({"gpu-only"})  # GPU-only beside a discrete GPU leaves the CPU free
QUIET = {"plan": 10 * MS, "gpu-only": 12 * MS, "cpu-only": 30 * MS}


def test_it_runs_the_best_and_tries_near_ones_less_often_while_they_stay_slower():
    c = Chooser(QUIET, Policy(explore_every=8, explore_max=32, refresh_every=1000), FREE)
    ran = calls(c, 128, QUIET)
    tries = [i for i, n in enumerate(ran) if n == "gpu-only"]  # near (within 1.3x)
    assert tries[0] == 7 and [b - a for a, b in zip(tries, tries[1:])] == [16, 32, 32, 32]
    assert "cpu-only" not in ran  # 3x the best: only a refresh tries it
    assert c.best == "plan" and c.switches_ == 0


def test_a_slowed_plan_gives_way_within_a_few_calls_and_comes_back():
    c = Chooser(QUIET, Policy(window=5, explore_every=4, refresh_every=1000), FREE)
    busy = {"plan": 16 * MS, "gpu-only": 12.5 * MS, "cpu-only": 60 * MS}  # the CPU taken
    ran = calls(c, 12, busy)
    assert ran[:3] == ["plan"] * 3  # the median of five moves after three slow calls
    assert c.best == "gpu-only" and c.switches_ == 1
    assert c.slowdown() == pytest.approx(1.6)
    calls(c, 40, QUIET)  # the plan, still near, is tried again and wins back
    assert c.best == "plan" and c.switches_ == 2
    assert c.summary()["running"] == "plan"


def test_a_busy_cpu_slows_every_split_at_once():
    """Regression: 8 processes spinning on the GPU machine's CPU made codl's split plans
    20-40x slower and left GPU-only as it was. Each candidate's own median had to be slowed
    in turn, so PoseNet ran split candidates through a whole busy phase (BENCH.md)."""
    load = {"plan": 20.7, "plan-cpu-x1.25": 18.9, "plan-cpu-x1.5625": 19.0,
            "plan-step-0.25": 20.6, "gpu-only": 20.4, "cpu-only": 71.5}
    c = Chooser({n: v * MS for n, v in load.items()}, Policy(), FREE)
    assert calls(c, 5, {n: v * MS for n, v in load.items()})[0] == "plan-cpu-x1.25"
    busy = {n: (v if n == "gpu-only" else 23 * v) * MS for n, v in load.items()}
    ran = calls(c, 200, busy)
    assert ran[3:].count("gpu-only") >= 190  # three slow calls, then GPU-only
    assert sum(n != "gpu-only" for n in ran[3:]) <= 5  # tries back off to one in 64
    ran = calls(c, 200, {n: v * MS for n, v in load.items()})  # the CPU free again
    back = ran.index("plan-cpu-x1.25", ran.index("plan-cpu-x1.25") + 1)
    assert back < 64 + 16 + 16 + 3 and c.best == "plan-cpu-x1.25"
    assert ran[-50:].count("plan-cpu-x1.25") >= 45


def test_near_ties_do_not_flip_back_and_forth():
    c = Chooser({"plan": 8.4 * MS, "gpu-only": 8.9 * MS}, Policy(), FREE)
    noisy = [8.6, 8.7, 8.5, 8.9, 9.0, 8.6, 8.4, 8.8, 9.1, 8.5] * 10  # the plan, 2-8% faster
    for s in noisy:
        name = c.next()
        c.record(name, s * MS if name == "plan" else 8.9 * MS)
    assert c.switches_ == 0 and c.best == "plan"


def test_on_shared_cores_every_alternative_shares_the_slowdown():
    c = Chooser(QUIET, Policy(explore_every=4, refresh_every=1000))  # no CPU-free one
    calls(c, 20, {n: 3 * v for n, v in QUIET.items()})  # all three slowed alike
    assert c.best == "plan" and c.slowdown() == pytest.approx(3)


def test_a_refresh_tries_every_alternative_in_turn():
    c = Chooser({"plan": 10 * MS, "gpu-only": 20 * MS, "cpu-only": 30 * MS},
                Policy(explore_every=1000, refresh_every=5), FREE)
    ran = calls(c, 20, {"plan": 10 * MS, "gpu-only": 20 * MS, "cpu-only": 30 * MS})
    assert ran.count("gpu-only") == ran.count("cpu-only") == 2
    s = c.summary()
    assert s["calls"] == {"plan": 16, "gpu-only": 2, "cpu-only": 2}
    assert s["latency_ms"] == pytest.approx({"plan": 10, "gpu-only": 20, "cpu-only": 30})
    assert s["cpu_slowdown"] == pytest.approx(1)


POSENET_LOAD = {"plan": 20.7, "plan-cpu-x1.25": 18.9, "plan-cpu-x1.5625": 19.0,
                "plan-step-0.25": 20.6, "gpu-only": 20.4, "cpu-only": 71.5}


def test_where_the_host_says_others_take_the_cpu_one_slow_call_is_enough():
    """With the host's counts (8 processes spinning: 8 cores taken), the slowdown of a taken
    CPU is learnt apart: one slow call moves the guard to GPU-only, the first call after the
    others leave runs the split again, and the next time they take the CPU the guard runs
    GPU-only at once. Without the counts (None) it takes three slow calls and three fast
    tries, as in the test above."""
    load = {n: v * MS for n, v in POSENET_LOAD.items()}
    busy = {n: v if n == "gpu-only" else 23 * v for n, v in load.items()}
    c = Chooser(load, Policy(), FREE)
    pick = calls(c, 20, load)[-1]
    ran = c.replay(busy, 100, others_cores=8.0)
    assert ran[0] == pick and ran[1:].count("gpu-only") >= 97  # one slow call, a try or two
    assert c.summary()["cpu"] == "taken" and c.summary()["cpu_slowdown_taken"] == pytest.approx(23)
    ran = c.replay(load, 50, others_cores=0.0)
    assert ran[0] == pick and ran.count("gpu-only") <= 1  # back on the first call
    ran = c.replay(busy, 50, others_cores=8.0)
    assert ran[0] == "gpu-only" and ran.count("gpu-only") >= 48  # learnt: at once
    blind = Chooser(load, Policy(), FREE)
    calls(blind, 20, load)
    assert blind.replay(busy, 100, others_cores=None)[:3] == [pick] * 3


def test_slow_calls_the_host_does_not_explain_still_move_the_guard():
    """The host shows no other program, yet the split slows (its own process, a thermal
    limit): three slow calls, then GPU-only, as without the counts."""
    load = {n: v * MS for n, v in POSENET_LOAD.items()}
    c = Chooser(load, Policy(), FREE)
    pick = calls(c, 20, load)[-1]
    slowed = {n: v if n == "gpu-only" else 2 * v for n, v in load.items()}
    ran = c.replay(slowed, 30, others_cores=0.0)
    assert ran[:3] == [pick] * 3 and ran[3] == "gpu-only"


def test_a_chooser_needs_an_alternative():
    with pytest.raises(ValueError, match="at least one"):
        Chooser({})


# ---- the runner, on a real guarded artifact --------------------------------------------------
@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    rng = np.random.default_rng(0)

    def body(bb, x):
        x = conv(bb, x, rng, 8, 3, padding=(1, 1, 1, 1), bias=True)
        return bb.emit(rop.nn.relu(x))

    mod = codl_tvm.load_model(single_function((1, 3, 16, 16), body))
    exe = codl_tvm.compile(mod, PAIR, Plan.uniform(mod, "H", 0.5), guard=True)
    return exe, exe.export(tmp_path_factory.mktemp("guarded") / "art")


def test_load_adapt_runs_the_alternatives_it_chooses(artifact):
    exe, art = artifact
    runner = runtime.load(art, adapt=True)
    assert isinstance(runner, AdaptiveRunner)
    ms = runner.choice["latency_ms"]
    kept = {"gpu-only", "cpu-only"} | ({"plan"} if ms["plan"] <= 1.5 * min(ms.values()) else set())
    assert set(runner.runners) == kept  # the singles always; the plan where it was near
    assert runner.choice["chosen"] == runner.chooser.best  # starts where the guard chose
    x = exe.random_inputs(seed=2)
    ref = exe.run(x)[0]
    for _ in range(3):
        np.testing.assert_allclose(runner.run(x)[0], ref, rtol=1e-5, atol=1e-6)
    assert runner.time(x, repeat=4) > 0
    assert sum(runner.chooser.runs_.values()) == 3 + 4
    assert runner.manifest == runner.current.manifest  # everything else: the running one


def test_candidates_far_slower_at_load_are_released(artifact):
    _, art = artifact
    runners = {"plan": runtime.load(art, choose=False),
               "gpu-only": runtime.load(art / "alternatives" / "gpu-only", choose=False),
               "cpu-only": runtime.load(art / "alternatives" / "cpu-only", choose=False)}
    runners["plan-cpu-x2"] = runners["plan"]
    choice = {"chosen": "plan", "latency_ms": {"plan": 1.0, "plan-cpu-x2": 1.6,
                                               "gpu-only": 5.0, "cpu-only": 6.0}}
    runner = AdaptiveRunner(runners, choice, Policy(keep=1.5))
    assert set(runner.runners) == {"plan", "gpu-only", "cpu-only"}  # the singles stay


def test_cli_run_adapt_says_what_it_ran(artifact, capsys):
    _, art = artifact
    assert cli_main(["run", str(art), "--adapt", "--time", "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "guard: keeps choosing (" in out and "gpu-only, cpu-only)" in out
    assert "guard: now " in out and "switches" in out


def test_cli_adapt_over_rpc_is_one_clear_error(artifact, capsys):
    _, art = artifact
    assert cli_main(["run", str(art), "--adapt", "--rpc", "127.0.0.1:9"]) == 1
    assert "--adapt runs an artifact on this machine" in capsys.readouterr().err
