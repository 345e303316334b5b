"""TVM's CPU thread pool sized from the CPU target's ``num-cores``.

TVM sizes its pool once per calling thread, at that thread's first parallel kernel, from
``TVM_NUM_THREADS`` or, unset, from the hardware concurrency, which it halves on x86 to skip
hyper-threads. On a host with one thread per core (the H100 machine's 16 vCPUs) that leaves
half the cores idle: the same kernels ran 1.55-1.65x faster with 16 workers than with TVM's 8
(``benchmarks/PREDICTOR.md``). The pair's ``num-cores`` is what the schedules and
the predictor's wave counts assume, so every place that runs CPU kernels (artifact runners,
the profiler, bundles, RPC sessions) sizes the pool from it first.

Imports only the standard library, so the runtime-only bundle runner can load it as a sibling.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

ENV = "TVM_NUM_THREADS"
# runtime.config_threadpool's affinity mode "big cores" (TVM's default, one worker per core)
_MODE_BIG = 1


def target_threads(cpu_spec: dict[str, Any] | None) -> int | None:
    """Workers a CPU target dict asks for: its ``num-cores``, or None where it does not say."""
    cores = (cpu_spec or {}).get("num-cores")
    return int(cores) if cores else None


def pair_threads(pair: dict[str, Any] | None) -> int | None:
    """Workers a ``DevicePair.to_json()`` document (an artifact's or bundle's ``pair``) asks for."""
    return target_threads((pair or {}).get("cpu"))


def use_cpu_threads(num_threads: int | None, remote: Any = None) -> int | None:
    """Give TVM's CPU pool ``num_threads`` workers; returns the count it runs with.

    Local (``remote`` None): sets ``TVM_NUM_THREADS`` unless the user set it (theirs wins), so
    every thread that has not yet run a CPU kernel builds its pool with that many workers.
    Remote (a ``tvm.rpc`` session): codl-tvm's server does the same in its session
    (``codl.rpc.cpu_threads``); a stock server only gets ``runtime.config_threadpool``, which
    over RPC stays within TVM's default pool, so start it with ``TVM_NUM_THREADS`` set.

    A pool already built cannot grow, nor one exceed the host's cores: then a warning names
    the count it runs. ``num_threads`` None leaves TVM's default and returns None.
    """
    if not num_threads:
        return None
    if remote is None:
        wanted = _env_threads() or num_threads
        if wanted != num_threads:
            warnings.warn(f"{ENV}={wanted} overrides the CPU target's num-cores {num_threads}",
                          stacklevel=2)  # fmt: skip
        os.environ.setdefault(ENV, str(num_threads))
        got = _num_threads()
    else:
        wanted, got = num_threads, _remote_threads(remote, num_threads)
    if got < wanted:
        where = "the RPC server's session" if remote is not None else "this thread"
        start = "the server process" if remote is not None else "the first CPU kernel"
        warnings.warn(
            f"TVM's CPU pool of {where} runs {got} workers, not the {wanted} asked: it was "
            f"built before (set {ENV}={wanted} before {start}) or the host has fewer cores",
            stacklevel=2,
        )
    return got


def _env_threads() -> int | None:
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        # TVM would read it with atoi: "abc" and "0" silently mean something else
        raise ValueError(f"{ENV}={text!r} is not a positive whole number of CPU workers")
    return int(text)


def _remote_threads(remote: Any, num_threads: int) -> int:
    try:
        helper = remote.get_function("codl.rpc.cpu_threads")
    except Exception:  # a stock server: "Module has no function"
        remote.get_function("runtime.config_threadpool")(_MODE_BIG, num_threads)
        return int(remote.get_function("runtime.NumThreads")())
    return int(helper(num_threads))


def _num_threads() -> int:
    # building the pool is what this call does on a thread that has none yet
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())
