"""The guard, call after call: a guarded artifact keeps choosing its fastest alternative.

:func:`codl_tvm.runtime.load` times a guarded artifact's alternatives (the plan, its
candidates, GPU-only and CPU-only) once, where it loads, and runs the fastest. A machine's
processors do not keep one speed: on the GPU machine the same CPU-only model ran 1.6x as long
a few minutes later (``benchmarks/BENCH.md``, "The CPU's speed drifts"), and on a phone other
apps take cores. A split chosen for a free CPU then waits for its CPU part on every call.

An :class:`AdaptiveRunner` runs the alternative it estimates fastest and now and then another.
Other programs slow every alternative that computes on the CPU at once (on the GPU machine, 8
spinning processes made codl's split plans 7-49x slower, all of them, and left GPU-only as it
was: ``benchmarks/BENCH.md``, "The CPU taken by other programs"), so the estimate shares what
is learnt: an alternative that uses the CPU takes its load-time figure times the CPU's
slowdown (the median, over the last calls of any such alternative, of call time over that
alternative's load-time figure) times its own bias (the median of its own calls' share of
that); an alternative that leaves the CPU free (GPU-only beside a discrete GPU) is the median
of its own last calls. A plan slowed by a busy CPU then gives way to GPU-only within a few
calls without each of its candidates being tried in turn, and the calls that try a split again
bring the splits back together when the CPU is free. Its :class:`Chooser` is plain Python and
holds the policy; the runner only times calls and says, before each, how many cores other
programs took (:class:`codl_tvm.cpu_load.CpuLoad`, from ``/proc``). The CPU's slowdown is
learnt apart for a CPU that others take and for one they leave, so a split gives way after one
slow call when other programs take the CPU, comes back on the first call after they leave it,
and gives way at once the next time they take it; slow calls that the host's counts do not
explain still move the guard, after a few of them.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .cpu_load import CpuLoad


@dataclass(frozen=True)
class Policy:
    """When an :class:`AdaptiveRunner` tries an alternative other than its best.

    Attributes
    ----------
    window : int
        Calls whose median is an estimate: of the CPU's slowdown, of an alternative's bias, of
        a CPU-free alternative's latency (the load-time guard's figure fills them at first, so
        one odd call does not outvote many rounds).
    explore_every : int
        Calls between two tries of another alternative that was near the best at load (round
        robin), after a try that changed the estimate.
    explore_max : int
        The longest such interval: each try that finds what the estimate said doubles it, so a
        CPU that stays busy is tried rarely (each try of a split then costs its slowed call).
    near : float
        How much slower than the load-time guard's pick an alternative may have been and
        still be tried that often (judged on the load-time figures, so the plan a busy CPU
        slowed is tried again, and comes back when the CPU is free).
    margin : float
        Another alternative replaces the running one only where it is estimated this share
        faster (ties within the calls' noise do not flip the choice back and forth).
    refresh_every : int
        One call in this many runs any other alternative (round robin), so one measured slow
        once (CPU-only beside a fast GPU) is measured again now and then.
    keep : float
        Candidates the load-time guard measured more than this factor slower than its pick
        are released (the single processors always stay: they are the guard's floor).
    taken_cores : float
        Other programs taking at least this many cores make the CPU *taken*: its slowdown is
        then judged on the calls made while it was taken (a core's worth: a parallel CPU
        kernel waits for its slowest worker, and one worker sharing its core is enough).
    """

    window: int = 5
    explore_every: int = 16
    explore_max: int = 64
    near: float = 1.3
    margin: float = 0.03
    refresh_every: int = 512
    keep: float = 1.5
    taken_cores: float = 1.0


SINGLES = ("gpu-only", "cpu-only")  # the guard's names of the single-processor builds
RECOVERING = 1.25  # a try this much faster than the CPU's slowdown says: the CPU is freeing
FREE, TAKEN = "free", "taken"  # the CPU as the host's counts show it (Policy.taken_cores)


def _window(value: float, n: int) -> deque:
    return deque([value] * n, maxlen=n)


@dataclass
class Chooser:
    """Which alternative runs each call, from the latencies recorded so far.

    Parameters
    ----------
    latency_s : Mapping[str, float]
        Each alternative's latency as the load-time guard measured it (seconds).
    policy : Policy
    cpu_free : frozenset[str]
        The alternatives that do not compute on the CPU (GPU-only beside a discrete GPU);
        every other one shares the CPU's slowdown.
    """

    latency_s: Mapping[str, float]
    policy: Policy = field(default_factory=Policy)
    cpu_free: frozenset[str] = frozenset()
    recent_: dict[str, deque] = field(init=False)
    cpu_slowdown_: dict[str, deque] = field(init=False)
    bias_: dict[str, deque] = field(init=False)
    runs_: dict[str, int] = field(init=False)
    switches_: int = field(init=False, default=0)
    last_: str | None = field(init=False, default=None)  # the alternative the last call ran
    explore_interval_: int = field(init=False)
    _best: str = field(init=False)
    _turn: int = field(init=False, default=0)
    _since_try: int = field(init=False, default=0)
    _trying: str | None = field(init=False, default=None)
    _near: list[str] = field(init=False)
    _cpu: str = field(init=False, default=FREE)

    def __post_init__(self) -> None:
        if not self.latency_s:
            raise ValueError("a chooser needs at least one alternative")
        w = self.policy.window
        # a CPU-free alternative's own calls; the others' come in through slowdown and bias
        self.recent_ = {n: _window(s, w) for n, s in self.latency_s.items() if n in self.cpu_free}
        # the load-time figures are a free CPU's; nothing is known yet of a taken one
        self.cpu_slowdown_ = {FREE: _window(1.0, w), TAKEN: deque(maxlen=w)}
        self.bias_ = {n: _window(1.0, w) for n in self.latency_s if n not in self.cpu_free}
        self.runs_ = dict.fromkeys(self.latency_s, 0)
        self.explore_interval_ = self.policy.explore_every
        # near as measured at load: a plan a busy CPU slowed stays among the tried ones
        fastest = min(self.latency_s.values())
        self._near = [n for n, v in self.latency_s.items() if v <= self.policy.near * fastest]
        self._best = min(self.latency_s, key=self.estimate_s)

    def observe(self, others_cores: float | None) -> None:
        """How many cores other programs took before the next call (None: not known, the
        calls alone judge)."""
        taken = others_cores is not None and others_cores >= self.policy.taken_cores
        self._cpu = TAKEN if taken else FREE

    def slowdown(self) -> float:
        """The CPU's slowdown since load: the median of recent calls over their load-time
        figures, over the alternatives that use the CPU, made while the CPU was as it is now
        (free or taken by other programs); none yet: the other state's."""
        calls = self.cpu_slowdown_[self._cpu] or self.cpu_slowdown_[FREE]
        return statistics.median(calls)

    def estimate_s(self, name: str) -> float:
        """What a call of ``name`` would take now (seconds)."""
        if name in self.cpu_free:
            return statistics.median(self.recent_[name])
        return self.latency_s[name] * self.slowdown() * statistics.median(self.bias_[name])

    @property
    def best(self) -> str:
        """The alternative estimated fastest; the running one where another is not faster by
        the policy's margin."""
        fastest = min(self.latency_s, key=self.estimate_s)
        if self.estimate_s(fastest) < (1 - self.policy.margin) * self.estimate_s(self._best):
            return fastest
        return self._best

    def next(self) -> str:
        """The alternative the next call runs."""
        call = sum(self.runs_.values()) + 1  # every call runs one alternative, then records
        best = self.best
        others = [n for n in self.latency_s if n != best]
        if others and call % self.policy.refresh_every == 0:
            return self._round_robin(others)
        near = [n for n in self._near if n != best]
        self._since_try += 1
        if near and self._since_try >= self.explore_interval_:
            self._since_try = 0
            self._trying = self._round_robin(near)
            return self._trying
        return best

    def record(self, name: str, seconds: float) -> None:
        """What a call of ``name`` took."""
        self.runs_[name] += 1
        self.last_ = name
        surprised = False
        if name in self.cpu_free:
            self.recent_[name].append(seconds)
        else:
            before = self.slowdown()
            ratio = seconds / self.latency_s[name]
            self.cpu_slowdown_[self._cpu].append(ratio)
            self.bias_[name].append(ratio / self.slowdown())
            surprised = ratio * RECOVERING < before
        if (best := self.best) != self._best:
            self.switches_ += 1
            self._best = best
            surprised = True
        if name == self._trying:  # a try: back off while tries find what was expected
            self._trying = None
            self.explore_interval_ = (self.policy.explore_every if surprised else
                                      min(2 * self.explore_interval_, self.policy.explore_max))

    def replay(self, latency_s: Mapping[str, float], calls: int,
               others_cores: float | None = None) -> list[str]:
        """Make ``calls`` choices, each call taking its alternative's ``latency_s`` while other
        programs take ``others_cores``; the names run (what this policy would do on recorded
        figures)."""
        ran = []
        for _ in range(calls):
            self.observe(others_cores)
            name = self.next()
            self.record(name, latency_s[name])
            ran.append(name)
        return ran

    def summary(self) -> dict[str, Any]:
        """What a report shows: the alternative now run, each one's calls, each one's
        estimate (ms), the CPU's state and its slowdown in each."""
        taken = self.cpu_slowdown_[TAKEN]
        return {"running": self.best, "switches": self.switches_, "calls": dict(self.runs_),
                "latency_ms": {n: 1e3 * self.estimate_s(n) for n in self.latency_s},
                "cpu": self._cpu, "cpu_slowdown": self.slowdown(),
                "cpu_slowdown_taken": statistics.median(taken) if taken else None}

    def _round_robin(self, names: list[str]) -> str:
        self._turn += 1
        return names[self._turn % len(names)]


class AdaptiveRunner:
    """A guarded artifact's alternatives behind one runner (``run``, ``time``; every other
    attribute is the running alternative's, ``choice`` the load-time guard's record).

    Parameters
    ----------
    runners : dict[str, Runner]
        The alternatives by name (``plan``, its candidates, ``gpu-only``, ``cpu-only``).
    choice : dict
        What the load-time guard measured (``{"chosen", "latency_ms"}``).
    policy : Policy
    """

    def __init__(self, runners: dict[str, Any], choice: dict[str, Any],
                 policy: Policy | None = None):
        policy = policy or Policy()
        ms = choice["latency_ms"]
        kept = {n: ms[n] for n in runners
                if n in SINGLES or ms[n] <= policy.keep * ms[choice["chosen"]]}
        self.runners = {n: runners[n] for n in kept}
        self.choice = choice
        # a GPU-only build beside a GPU of its own leaves the CPU free; the cpu-pair's second
        # llvm device computes on the same cores
        gpu_only = runners.get("gpu-only")
        free = frozenset({"gpu-only"} if gpu_only and gpu_only.manifest["devices"][0][0] != "cpu"
                         else ())
        self.chooser = Chooser({n: v / 1e3 for n, v in kept.items()}, policy, free)
        self.cpu_load = CpuLoad()

    @property
    def current(self) -> Any:
        """The alternative the next call runs unless it tries another."""
        return self.runners[self.chooser.best]

    def run(self, inputs: dict[str, Any]) -> list[Any]:
        """Run once on the chosen alternative; outputs as numpy arrays in model order."""
        self.chooser.observe(self.cpu_load.others_cores())
        name = self.chooser.next()
        start = time.perf_counter()
        outputs = self.runners[name].run(inputs)
        self.chooser.record(name, time.perf_counter() - start)
        return outputs

    def time(self, inputs: dict[str, Any], repeat: int = 20, number: int = 1) -> float:
        """Median seconds of one inference over ``repeat`` calls, each on the alternative the
        chooser picks (a :meth:`Runner.time` of one repeat: a warm-up call, then ``number``
        timed)."""
        times = []
        for _ in range(repeat):
            self.chooser.observe(self.cpu_load.others_cores())
            name = self.chooser.next()
            seconds = self.runners[name].time(inputs, repeat=1, number=number)
            self.chooser.record(name, seconds)
            times.append(seconds)
        return statistics.median(times)

    def __getattr__(self, name: str) -> Any:
        if name in {"runners", "choice", "chooser", "cpu_load"}:  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.current, name)
