"""What LLVM makes of the CPU kernels for a target, read off their assembly.

Some CPU terms depend on how LLVM compiles a kernel for the target CPU, not on the kernel's
TIR: which rows of an elementwise pass or of the direct conv's pad pass it unrolls and then
vectorizes across rows with gathers and scatters, and how wide a vector its loop vectorizer
picks. These facts (``Machine.llvm_vector_floats``, ``eltwise_unroll_*``, ``*_gather_*``) are
detected here by compiling small probe kernels for the pair's CPU target with the project's
schedules and searching for the widths where the code changes. The profiler stores them with
the machine facts beside the samples; ``codl-tvm train`` puts them in the predictor file.

It runs where the kernels are compiled (this host, for any target LLVM can emit, cross
targets included): a few hundred probes of 0.05 s, 15 s in all, kept per target and TVM
version in the user's cache (``$CODL_TVM_CACHE/codegen``, else ``~/.cache/codl-tvm/codegen``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import tvm
from tvm.relax import op as rop

from codl_tvm.predictor.cpu_terms import direct_padded_in
from codl_tvm.predictor.machine import reference
from codl_tvm.predictor.mirror import sampled
from codl_tvm.predictor.opspec import OpSpec
from codl_tvm.schedules import testing
from codl_tvm.schedules.target_info import target_info
from codl_tvm.tiling import use_variants

# the register each ISA's vector float max writes (the pool probe) -> floats per vector
_VECTOR_MAX = (
    (re.compile(r"vmaxps\s+[^\n]*%zmm"), 16),
    (re.compile(r"vmaxps\s+[^\n]*%ymm"), 8),
    (re.compile(r"v?maxps\s+[^\n]*%xmm"), 4),
    (re.compile(r"(fmax|fcmgt)\s+v\d+\.4s"), 4),  # AArch64 NEON (a compare and a select)
)
_GATHER = re.compile(r"gather", re.IGNORECASE)
_SCATTER = re.compile(r"scatter", re.IGNORECASE)
_PAD_CASES = ("identity", "crop", "exact", "inexact", "one_row", "tail")
IC, OC = 16, 32  # probe convs: enough channels for the direct kernel's blocking, fast to build
MAX_W = 128  # widest row a search tries


PROBES_VERSION = 1  # bump when a probe changes: cached facts of other versions are not read


def detect(cpu_target: dict[str, Any] | str) -> dict[str, Any]:
    """The codegen facts of ``cpu_target`` (an llvm target dict or JSON), by Machine field;
    a fact whose probe finds no answer (the ISA has no gathers) says that its rule never
    fires (an empty width range, or 0)."""
    key = cpu_target if isinstance(cpu_target, str) else json.dumps(cpu_target, sort_keys=True)
    return dict(_cached(key))


def cache_path(target_json: str) -> Path:
    """Where the facts of a target are kept (one small JSON file per target and TVM)."""
    env = os.environ.get("CODL_TVM_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "codl-tvm"
    digest = hashlib.sha256(f"{PROBES_VERSION} {tvm.__version__} {target_json}".encode())
    return root / "codegen" / f"{digest.hexdigest()[:16]}.json"


@cache
def _cached(target_json: str) -> tuple[tuple[str, Any], ...]:
    path = cache_path(target_json)
    try:
        doc = json.loads(path.read_text())
        return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in doc.items())
    except (OSError, ValueError, AttributeError):
        pass
    facts = _detect(target_json)
    try:  # a cache: a folder that cannot be written costs the probes next time, nothing else
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(facts)))
        os.replace(tmp, path)
    except OSError:
        pass
    return facts


def _detect(target_json: str) -> tuple[tuple[str, Any], ...]:
    target = tvm.target.Target(json.loads(target_json))
    probe = _Probe(target)
    pads = probe.pad_cases()
    facts = {
        "llvm_vector_floats": probe.vector_floats(),
        "eltwise_unroll_add": probe.last(lambda w: probe.eltwise_scatters("add", w), 9),
        "eltwise_unroll_relu": probe.last(lambda w: probe.eltwise_scatters("relu", w), 9),
        "pad_gather_identity_w": _span(pads["identity"]),
        "pad_gather_crop_w": _span(pads["crop"]),
        "sampled_gather_w": _span(pads["exact"])[1],
        "sampled_gather_inexact_w": _span(pads["inexact"])[1],
        "sampled_gather_one_row_w": _span(pads["one_row"]),
        # the rule is "wider than this": the widest contiguous row below the first gathered
        "sampled_gather_tail_w": _span(pads["tail"])[0] - 1 if any(pads["tail"].values())
        else MAX_W,
    }
    return tuple(facts.items())


def _span(cases: dict[int, bool]) -> tuple[int, int]:
    """The narrowest and widest gathered row of a case; (0, 0): none gathers."""
    gathered = [wp for wp, g in cases.items() if g]
    return (min(gathered), max(gathered)) if gathered else (0, 0)


class _Probe:
    def __init__(self, target: tvm.target.Target) -> None:
        self.target = target
        info = target_info(target)
        self.machine = dataclasses.replace(reference(), lanes=info.lanes, cores=info.cores)

    def _asm(self, func: Any) -> str:
        # the kernels of the machine whose widths the probes compute (``direct_padded_in``)
        with use_variants(self.machine.variants):
            lib = testing.build(testing.schedule(func, self.target), self.target)
        return (lib.mod if hasattr(lib, "mod") else lib).inspect_source("asm")

    # ---- the probes ------------------------------------------------------------------
    def vector_floats(self) -> int:
        """Floats per vector of the loop vectorizer (a 64-wide max pool row)."""
        asm = self._asm(testing.pool2d_func((1, 4, 2, 128), "max", pool_size=(2, 2),
                                            strides=(2, 2)))  # fmt: skip
        return next((n for pattern, n in _VECTOR_MAX if pattern.search(asm)), 1)

    def eltwise_scatters(self, op: str, w: int) -> bool:
        """Whether the elementwise pass over rows ``w`` wide stores by scatter."""
        if op == "add":
            func = testing.op_func([("x", (1, 64, w, w)), ("b", (1, 64, 1, 1))],
                                   lambda bb, x, b: rop.add(x, b))  # fmt: skip
        else:
            func = testing.op_func([("x", (1, 64, w, w))], lambda bb, x: rop.nn.relu(x))
        return bool(_SCATTER.search(self._asm(func)))

    def pad_gathers(self, h: int, w: int, k: int, stride: int) -> bool:
        """Whether the direct conv's pad pass (its first parallel loop) loads by gather."""
        func = testing.conv2d_func((1, IC, h, w), (OC, IC, k, k), strides=(stride, stride),
                                   padding=(0, 0, 0, 0))  # fmt: skip
        lambdas = re.split(r"\n\.L__tvm_parallel_lambda[.0-9]*:", self._asm(func))
        return len(lambdas) > 1 and bool(_GATHER.search(_body(lambdas[1])))

    def pad_cases(self) -> dict[str, dict[int, bool]]:
        """Whether the pad pass gathers, by case of ``mirror.pad_gathered`` and row width:
        one probe per (case, width) among unpadded convs up to ``MAX_W // 2`` wide (the
        pass's width is the kernel's, ``cpu_terms.direct_padded_in``, register tiles
        included)."""
        cases: dict[str, dict[int, bool]] = {c: {} for c in _PAD_CASES}
        shapes = [(w, w, k, 1) for k in (2, 3, 4, 5) for w in range(k + 1, MAX_W // 2 + 1)]
        shapes += [(w, w, k, 2) for k in (1, 2, 3) for w in range(k + 1, MAX_W // 2 + 1)]
        shapes += [(1, w, 1, 2) for w in range(2, MAX_W // 4)]
        for h, w, k, stride in shapes:
            s = OpSpec("conv2d", h, w, IC, OC, k, k, stride, stride)
            hp, wp = direct_padded_in(s, self.machine)
            case = _pad_case(s, hp, wp)
            if case and wp not in cases[case]:
                cases[case][wp] = self.pad_gathers(h, w, k, stride)
        return cases

    # ---- searches ----------------------------------------------------------------------
    def last(self, holds: Callable[[int], bool], lo: int, hi: int = MAX_W) -> int:
        """The largest width from ``lo`` where ``holds`` (true from ``lo`` up to it, false
        past it); ``lo - 1`` where it does not hold at ``lo``."""
        if not holds(lo):
            return lo - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if holds(mid) else (lo, mid - 1)
        return lo


def _pad_case(s: OpSpec, hp: int, wp: int) -> str | None:
    """Which width rule of ``mirror.pad_gathered`` a pad pass of ``hp`` x ``wp`` falls under."""
    if sampled(s):
        tail = wp - s.out_w
        if tail:
            return "tail" if tail >= 2 else None
        if hp == 1:
            return "one_row"
        return "exact" if s.H == s.SH * s.out_h and s.W == s.SW * s.out_w else "inexact"
    if hp == s.H and wp == s.W:
        return "identity"
    return "crop" if 2 <= hp < s.H else None


def _body(asm: str) -> str:
    """A parallel lambda's code up to its end (the next label that is not a local one)."""
    lines = []
    for line in asm.split("\n"):
        label = re.match(r"^[A-Za-z_.][\w.]*:", line)
        if label and (not line.startswith(".L") or line.startswith(".Lfunc_end")):
            break
        lines.append(line)
    return "\n".join(lines)
