"""TVM's CPU pool takes the CPU target's num-cores (TVM alone halves the logical CPUs on x86).

Each pool case runs in a fresh process: TVM builds a thread's pool once, at its first parallel
kernel, and a pytest process has long since built one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from codl_tvm.device import DevicePair, physical_cores

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True,
                          text=True, timeout=120, env=dict(base, PYTHONPATH=str(ROOT), **env))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


POOL = ("import tvm; from codl_tvm.profiler.cpu_pool import use_cpu_threads; "
        "n = tvm.get_global_func('runtime.NumThreads'); ")


CORES = os.cpu_count() or 1


def test_a_fresh_thread_gets_the_asked_workers():
    # TVM alone would take CORES // 2 on x86
    proc = _run(POOL + f"print(use_cpu_threads({CORES}), n())")
    assert proc.stdout.split() == [str(CORES), str(CORES)]
    assert "Warning" not in proc.stderr


def test_none_leaves_tvms_default():
    default = int(_run(POOL + "print(n())").stdout)
    assert _run(POOL + "print(use_cpu_threads(None), n())").stdout.split() == ["None",
                                                                                str(default)]


def test_the_users_variable_wins_with_a_warning():
    proc = _run(POOL + "print(use_cpu_threads(3))", TVM_NUM_THREADS="1")
    assert proc.stdout.strip() == "1"
    assert "TVM_NUM_THREADS=1 overrides the CPU target's num-cores 3" in proc.stderr


@pytest.mark.parametrize("bad", ["abc", "0", "-2"])
def test_a_broken_variable_is_one_clear_error(bad: str):
    base = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", POOL + "use_cpu_threads(2)"], capture_output=True,
                          text=True, timeout=120,
                          env=dict(base, PYTHONPATH=str(ROOT), TVM_NUM_THREADS=bad))
    assert proc.returncode != 0
    assert f"TVM_NUM_THREADS='{bad}' is not a positive whole number" in proc.stderr


def test_a_pool_built_before_cannot_grow_and_says_so():
    proc = _run(POOL + "d = n(); print(d, use_cpu_threads(d + 1))")
    before, after = proc.stdout.split()
    assert before == after
    assert f"runs {before} workers, not the {int(before) + 1} asked" in proc.stderr


def _fake_sysfs(root: Path, siblings: dict[int, str]) -> Path:
    for cpu, text in siblings.items():
        topo = root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings_list").write_text(text + "\n")
    return root


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux sysfs topology")
def test_physical_cores_counts_a_cores_threads_once(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    one_core = ",".join(map(str, allowed))
    assert physical_cores(_fake_sysfs(tmp_path / "ht", {c: one_core for c in allowed})) == 1
    own = {c: str(c) for c in allowed}
    assert physical_cores(_fake_sysfs(tmp_path / "no-ht", own)) == len(allowed)
    assert physical_cores(tmp_path / "none") == len(allowed)  # no topology: logical count


def test_host_pairs_default_to_physical_cores():
    assert DevicePair.preset("cpu-pair").cpu_spec["num-cores"] == physical_cores()
    assert DevicePair.preset("cpu-pair", num_cores=5).cpu_spec["num-cores"] == 5
