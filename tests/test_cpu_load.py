"""Cores taken by other programs (codl_tvm.cpu_load): the kernel's counts parsed from files in
``/proc``'s format, and the real ``/proc`` while another process spins."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from codl_tvm.cpu_load import CpuLoad, host_busy_ticks, own_ticks

STAT = ("cpu  {user} 0 {system} 90000 50 0 0 {steal} 0 0\ncpu0 {user} 0 {system} 90000 50 0 0 "
        "{steal} 0 0\ncpu1 1000 0 0 9 0 0 0 0 0 0\nintr 5 6\n")
SELF = "4242 (python (a) b) R 1 4242 4242 0 -1 4194304 100 0 0 0 {utime} {stime} 0 0 20 0 9\n"


def write(proc: Path, user: int, system: int, steal: int, utime: int, stime: int) -> None:
    (proc / "self").mkdir(parents=True, exist_ok=True)
    (proc / "stat").write_text(STAT.format(user=user, system=system, steal=steal))
    (proc / "self" / "stat").write_text(SELF.format(utime=utime, stime=stime))


def test_the_counts_are_parsed_as_proc_5_says():
    text = STAT.format(user=10, system=5, steal=2)
    assert host_busy_ticks(text, {0}) == 17  # idle and iowait left out; cpu1 not ours
    assert host_busy_ticks(text) == 17 + 1000
    assert own_ticks(SELF.format(utime=7, stime=3)) == 10  # a command name with ") "
    with pytest.raises(ValueError):
        host_busy_ticks("intr 1 2 3\n")
    with pytest.raises(ValueError):
        host_busy_ticks(text, {7})


def test_others_are_the_host_busy_time_minus_this_process(tmp_path):
    now = [100.0]
    load = CpuLoad(span_s=0.5, proc=tmp_path, clock=lambda: now[0])
    load.cpus = {0}  # this process may run on cpu0 only; cpu1's time is another machine's
    ticks = load.ticks_per_s
    write(tmp_path, 0, 0, 0, 0, 0)
    assert load.others_cores() is None  # nothing to compare with yet
    now[0] += 1.0  # a second: the host busy 3 cores' worth, 1 of them this process (+ steal)
    write(tmp_path, 2 * ticks, ticks // 2, ticks // 2, ticks // 2, ticks // 2)
    assert load.others_cores() == pytest.approx(2.0)
    now[0] += 0.01  # sooner than a tenth of the span: not read again
    write(tmp_path, 9 * ticks, 0, 0, 0, 0)
    assert load.others_cores() == pytest.approx(2.0)
    now[0] += 0.05  # read; the span still reaches back to the first sample
    write(tmp_path, 2 * ticks, ticks // 2, ticks // 2, ticks // 2, ticks // 2)
    assert load.others_cores() == pytest.approx(2.0 / 1.06)


def test_no_proc_is_not_known(tmp_path):
    assert CpuLoad(proc=tmp_path / "none").others_cores() is None


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="no /proc here")
def test_another_process_spinning_is_seen():
    load = CpuLoad(span_s=0.5)
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\n"
                             "while time.time() - t < 3: pass"])
    try:
        time.sleep(0.3)  # the child is running
        load.others_cores()
        seen = []
        for _ in range(8):
            time.sleep(0.15)
            seen.append(load.others_cores())
    finally:
        spin.kill()
        spin.wait()
    assert max(v for v in seen if v is not None) >= 0.5  # a core's worth, give or take ticks
