"""How many cores other programs take: the host's busy CPU time minus this process's.

The adaptive guard (:mod:`codl_tvm.adaptive_guard`) asks before each call. On Linux (Android
too) the kernel counts both in ``/proc``: ``/proc/stat`` has each CPU's time by kind,
``/proc/self/stat`` this process's user and system time, all in clock ticks. The busy time of
the CPUs this process may run on (its affinity: a container's cpuset leaves the host's other
CPUs out) minus its own, over the last half second, is the CPU that other programs took there
(a hypervisor's steal counts: another guest took it), in cores. Where ``/proc`` cannot be read
the answer is None, and the guard judges by its calls alone. Standard library only.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

# /proc/stat "cpu" fields after the label: user nice system idle iowait irq softirq steal ...;
# busy = all but idle and iowait (guest time is already inside user)
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
# /proc/PID/stat fields after the ")" that ends the command name: state is field 3, utime 14,
# stime 15 (proc(5))
_UTIME, _STIME = 14 - 3, 15 - 3


def host_busy_ticks(stat_text: str, cpus: set[int] | None = None) -> int:
    """Busy clock ticks of the CPUs ``cpus`` (None: all) together, from ``/proc/stat``'s
    text."""
    total, seen = 0, False
    for line in stat_text.splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu") or fields[0] == "cpu":
            continue
        if cpus is not None and int(fields[0][3:]) not in cpus:
            continue
        values = [int(v) for v in fields[1:]]
        total += sum(values[i] for i in _BUSY_FIELDS if i < len(values))
        seen = True
    if not seen:
        raise ValueError("/proc/stat has no line of the CPUs asked for")
    return total


def own_ticks(self_stat_text: str) -> int:
    """This process's user plus system clock ticks, from ``/proc/self/stat``'s text."""
    fields = self_stat_text.rsplit(")", 1)[1].split()
    return int(fields[_UTIME]) + int(fields[_STIME])


class CpuLoad:
    """Cores taken by other programs, over the last ``span_s`` seconds.

    Parameters
    ----------
    span_s : float
        The interval the answer averages over: a clock tick is 10 ms on most kernels, so a
        shorter one would count a core taken or free by chance.
    proc : Path
        Where the kernel's files are (``/proc``).
    clock : callable
        Seconds, monotonic.
    """

    def __init__(self, span_s: float = 0.5, proc: Path = Path("/proc"),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.span_s = span_s
        self.proc = Path(proc)
        self.clock = clock
        self.ticks_per_s = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        getaffinity = getattr(os, "sched_getaffinity", None)
        self.cpus = set(getaffinity(0)) if getaffinity else None
        self._samples: deque[tuple[float, int, int]] = deque()
        self._last: float | None = None

    @property
    def last_cores(self) -> float | None:
        """The last answer of :meth:`others_cores`."""
        return self._last

    def _sample(self) -> tuple[float, int, int] | None:
        try:
            host = host_busy_ticks((self.proc / "stat").read_text(), self.cpus)
            own = own_ticks((self.proc / "self" / "stat").read_text())
        except (OSError, ValueError, IndexError):
            return None
        return self.clock(), host, own

    def others_cores(self) -> float | None:
        """Cores the rest of the host took over about the last ``span_s`` (None: unknown
        here). ``/proc`` is read at most every ``span_s`` / 10 (a read takes 0.1-0.2 ms, a
        split model's call can take 2 ms); between reads, and until ``span_s`` / 5 has passed
        since the first one, the last answer."""
        if self._samples and self.clock() - self._samples[-1][0] < self.span_s / 10:
            return self._last
        now = self._sample()
        if now is None:
            return None
        self._samples.append(now)
        while len(self._samples) > 2 and now[0] - self._samples[1][0] >= self.span_s:
            self._samples.popleft()  # keep the newest sample at least span_s old
        t0, host0, own0 = self._samples[0]
        if now[0] - t0 < self.span_s / 5:
            return self._last
        ticks = (now[1] - host0) - (now[2] - own0)
        self._last = max(0.0, ticks / self.ticks_per_s / (now[0] - t0))
        return self._last
