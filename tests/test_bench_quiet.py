"""Benchmarks time each engine with the process's other threads idle
(``benchmarks/quiet.py``): a regression test for onnxruntime timed while codl-tvm's workers
still spun (MobileNet-V2 16.4-17.2 ms instead of 5.0-6.6 on 2 cores)."""

from __future__ import annotations

import threading
import time

from tests.helpers import load_benchmark

quiet = load_benchmark("quiet")


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_quiesce_waits_for_a_spinning_thread():
    quiet.quiesce()  # threads of earlier tests in this process (TVM's pool) go idle first
    worker = threading.Thread(target=_spin, args=(0.4,))
    worker.start()
    try:
        waited = quiet.quiesce(timeout_s=3.0)
    finally:
        worker.join()
    assert waited >= 0.3


def test_quiesce_returns_at_once_when_idle():
    quiet.quiesce()
    idle = threading.Thread(target=time.sleep, args=(1.0,))
    idle.start()
    try:
        assert quiet.quiesce(timeout_s=3.0) < 0.5
    finally:
        idle.join()


def test_others_cpu_counts_only_other_threads():
    quiet.quiesce()
    before = quiet.others_cpu_s()
    _spin(0.2)  # this thread's own time is not counted
    assert quiet.others_cpu_s() - before < 0.1
