"""The guard, call after call: a guarded artifact keeps choosing its fastest alternative.

:func:`codl_tvm.runtime.load` times a guarded artifact's alternatives (the plan, its
candidates, GPU-only and CPU-only) once, where it loads, and runs the fastest. A machine's
processors do not keep one speed: on the GPU machine the same CPU-only model ran 1.6x as long
a few minutes later (``benchmarks/BENCH.md``, "The CPU's speed drifts"), and on a phone other
apps take cores. A split chosen for a free CPU then waits for its CPU part on every call.

An :class:`AdaptiveRunner` keeps each alternative's recent latencies (seeded with what the
load-time guard measured), runs the one whose median is lowest, and now and then runs another:
one whose median is near the best's, and, more rarely, every one in turn. A slowed CPU raises
the running plan's median within a few calls, past the GPU-only figure the guard measured,
and the runner moves there; the calls that try the plan again bring it back when the CPU is
free. Its :class:`Chooser` is plain Python and holds the policy; the runner only times calls.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Policy:
    """When an :class:`AdaptiveRunner` tries an alternative other than its best.

    Attributes
    ----------
    window : int
        Recent calls per alternative whose median is its latency (the load-time guard's
        figure fills it at first).
    explore_every : int
        One call in this many runs another alternative that was near the best at load
        (round robin).
    near : float
        How much slower than the load-time guard's pick an alternative may have been and
        still be tried that often (judged on the load-time figures, so the plan a busy CPU
        slowed is tried again, and comes back when the CPU is free).
    refresh_every : int
        One call in this many runs any other alternative (round robin), so one measured slow
        once (CPU-only beside a fast GPU) is measured again now and then.
    keep : float
        Candidates the load-time guard measured more than this factor slower than its pick
        are released (the single processors always stay: they are the guard's floor).
    """

    window: int = 5
    explore_every: int = 16
    near: float = 1.3
    refresh_every: int = 512
    keep: float = 1.5


SINGLES = ("gpu-only", "cpu-only")  # the guard's names of the single-processor builds


@dataclass
class Chooser:
    """Which alternative runs each call, from the latencies recorded so far.

    Parameters
    ----------
    latency_s : Mapping[str, float]
        Each alternative's latency as the load-time guard measured it (seconds).
    policy : Policy
    """

    latency_s: Mapping[str, float]
    policy: Policy = field(default_factory=Policy)
    recent_: dict[str, deque] = field(init=False)
    runs_: dict[str, int] = field(init=False)
    switches_: int = field(init=False, default=0)
    _best: str = field(init=False)
    _turn: int = field(init=False, default=0)
    _near: list[str] = field(init=False)

    def __post_init__(self) -> None:
        if not self.latency_s:
            raise ValueError("a chooser needs at least one alternative")
        # the load-time figure fills the window: a median of many rounds, which one odd call
        # should not outvote
        w = self.policy.window
        self.recent_ = {n: deque([s] * w, maxlen=w) for n, s in self.latency_s.items()}
        self.runs_ = dict.fromkeys(self.latency_s, 0)
        # near as measured at load: a plan a busy CPU slowed stays among the tried ones
        fastest = min(self.latency_s.values())
        self._near = [n for n, v in self.latency_s.items() if v <= self.policy.near * fastest]
        self._best = self.best

    def estimate_s(self, name: str) -> float:
        """The median of ``name``'s recent latencies."""
        return statistics.median(self.recent_[name])

    @property
    def best(self) -> str:
        """The alternative with the lowest median (the first named, on a tie)."""
        return min(self.recent_, key=self.estimate_s)

    def next(self) -> str:
        """The alternative the next call runs."""
        call = sum(self.runs_.values()) + 1  # every call runs one alternative, then records
        best = self.best
        others = [n for n in self.recent_ if n != best]
        if others and call % self.policy.refresh_every == 0:
            return self._round_robin(others)
        near = [n for n in self._near if n != best]
        if near and call % self.policy.explore_every == 0:
            return self._round_robin(near)
        return best

    def record(self, name: str, seconds: float) -> None:
        """What a call of ``name`` took."""
        self.recent_[name].append(seconds)
        self.runs_[name] += 1
        if (best := self.best) != self._best:
            self.switches_ += 1
            self._best = best

    def summary(self) -> dict[str, Any]:
        """What a report shows: the alternative now run, each one's calls and median (ms)."""
        return {"running": self.best, "switches": self.switches_, "calls": dict(self.runs_),
                "latency_ms": {n: 1e3 * self.estimate_s(n) for n in self.recent_}}

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
        self.chooser = Chooser({n: v / 1e3 for n, v in kept.items()}, policy)

    @property
    def current(self) -> Any:
        """The alternative the next call runs unless it tries another."""
        return self.runners[self.chooser.best]

    def run(self, inputs: dict[str, Any]) -> list[Any]:
        """Run once on the chosen alternative; outputs as numpy arrays in model order."""
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
            name = self.chooser.next()
            seconds = self.runners[name].time(inputs, repeat=1, number=number)
            self.chooser.record(name, seconds)
            times.append(seconds)
        return statistics.median(times)

    def __getattr__(self, name: str) -> Any:
        if name in {"runners", "choice", "chooser"}:  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.current, name)
