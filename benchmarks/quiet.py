"""Wait for a process's other threads to go idle before timing the next engine.

Engines timed in one process leave worker threads behind them: TVM's pool spins for a fixed
count of yields after each parallel call (a few tenths of a second on 2 cores), onnxruntime's
and OpenMP's for their own spans. Timing the next engine while they spin gives it fewer cores:
on the 2-core dev host onnxruntime's MobileNet-V2 took 16.4-17.2 ms after a fixed 0.1 s pause
behind codl-tvm's calls, 5.0-6.6 ms with this wait (benchmarks/ANCHORS.md).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path


def others_cpu_s() -> float:
    """CPU seconds the process's threads other than the calling one have used."""
    me, tick = threading.get_native_id(), os.sysconf("SC_CLK_TCK")
    total = 0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == me:
            continue
        try:  # fields after the command: utime and stime are the 12th and 13th
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def quiesce(timeout_s: float = 5.0, window_s: float = 0.05) -> float:
    """Wait until the process's other threads are idle (under 10% of a core over
    ``window_s``), at most ``timeout_s``; returns the seconds waited."""
    start = time.perf_counter()
    last = others_cpu_s()
    while time.perf_counter() - start < timeout_s:
        time.sleep(window_s)
        now = others_cpu_s()
        if now - last < 0.1 * window_s:
            break
        last = now
    return time.perf_counter() - start
