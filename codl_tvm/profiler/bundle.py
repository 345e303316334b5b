"""Offline bundle: compile every kernel here, measure anywhere with ``bundle_runner.py``.

A bundle is a folder with ``libN.so`` (exported VM executables, one per batch of jobs) and
``manifest.json`` (the copies' library is ``null``: the runner times staged copies between
tensors it makes, :func:`codl_tvm.profiler.kernels.transfer_entries`)::

    {"version": 1, "pair": {...DevicePair.to_json()...}, "cuda_arch": "sm_90" | null,
     "columns": [...schema.COLUMNS], "key_columns": [...],
     "libs": [{"file": "lib0.so" | null, "role": "gpu" | "cpu" | null,
               "devices": [["cuda", 0], ...],
               "entries": [{"name": "conv2d_3", "inputs": [[1, 64, 52, 52], ...],
                            "input_devices": [0, 0], "timer_device": 0, "flops": 123,
                            "row": {...every CSV column but the measured ones...}}]}]}

Libraries alternate between the roles (GPU, CPU, copy/transfer; each role's cheapest first),
so a size cap cuts every role evenly; what it leaves out is counted per role in ``left_out_by``
(``left_out`` is the total) and printed. The runner visits the entries round-robin over the
libraries anyway (``rounds.py``).

:func:`join_bundles` makes one bundle of several built for the same pair, so that their rows
are measured interleaved in one run: new shapes beside control rows of a samples file, whose
ratio to that file is then the speed of the machine at the very time the new shapes ran.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from codl_tvm.device import DevicePair
from codl_tvm.outputs import BUNDLE_FORMAT, atomic_folder
from codl_tvm.profiler import codegen_facts, space
from codl_tvm.profiler.bundle_runner import MANIFEST_VERSION
from codl_tvm.profiler.kernels import build_role_module, compile_module, transfer_entries
from codl_tvm.profiler.measure import (
    Batch,
    entry_placement,
    entry_row,
    lib_devices,
    plan_batches,
)
from codl_tvm.profiler.rounds import interleave
from codl_tvm.profiler.schema import COLUMNS, KEY_COLUMNS
from codl_tvm.profiler.space import Job
from codl_tvm.tiling import current_variants, use_gpu_sms


def role_name(role: str | None) -> str:
    return role or "copy"


def interleave_batches(batches: list[Batch]) -> list[Batch]:
    """Round-robin over the roles' batch lists (gpu, cpu, copy), each keeping its order."""
    by_role: dict[str, list[Batch]] = {}
    for b in batches:
        by_role.setdefault(role_name(b[0]), []).append(b)
    return interleave([by_role[r] for r in ("gpu", "cpu", "copy") if r in by_role])


def build_bundle(
    pair: DevicePair,
    jobs: Sequence[Job],
    out_dir: str | Path,
    batch_size: int = 48,
    max_bytes: int = 40 << 20,
    progress: bool = True,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Compile ``jobs`` for ``pair`` into ``out_dir``; returns the manifest.

    Stops adding libraries once the folder would pass ``max_bytes`` (the rest is reported in
    the manifest's ``left_out``). The folder is written under a temporary name and renamed at
    the end, so a failed build leaves no half bundle behind; an existing bundle is replaced
    only with ``overwrite`` (:func:`codl_tvm.outputs.atomic_folder`).
    """
    with atomic_folder(out_dir, overwrite=overwrite) as tmp, use_gpu_sms(pair.gpu_sms):
        jobs = space.for_pair(jobs, pair.runs_block_copies or pair.is_cpu_only)
        return _fill_bundle(tmp, pair, jobs, batch_size, max_bytes, progress)


def _fill_bundle(tmp: Path, pair: DevicePair, jobs: Sequence[Job], batch_size: int,
                 max_bytes: int, progress: bool) -> dict[str, Any]:
    batches = interleave_batches(plan_batches(jobs, batch_size))
    libs: list[dict[str, Any]] = []
    total = 0
    left_out = {"gpu": 0, "cpu": 0, "copy": 0}
    for n, (role, batch) in enumerate(tqdm(batches, desc="bundle", disable=not progress)):
        if total >= max_bytes:
            left_out[role_name(role)] += len(batch)
            continue
        if role is None:  # staged copies: timed on tensors the runner makes, no library
            libs.append(_lib_doc(None, role, pair, transfer_entries(batch)))
            continue
        mod, entries = build_role_module(batch, pair, role)
        name = f"lib{n}.so"
        compile_module(mod, pair, role).export_library(str(tmp / name))
        total += (tmp / name).stat().st_size
        libs.append(_lib_doc(name, role, pair, entries))
    manifest = {
        "format": BUNDLE_FORMAT,
        "version": MANIFEST_VERSION,
        "pair": pair.to_json(),
        "cuda_arch": pair.gpu_spec.get("arch") if pair.gpu_spec["kind"] == "cuda" else None,
        # the kernels' variants travel to the runner's machine facts, then to the predictor
        "kernel_variants": current_variants().to_json(),
        # what LLVM made of the CPU kernels (read off this host's compile for the target)
        "codegen_facts": codegen_facts.detect(pair.cpu_spec),
        "columns": list(COLUMNS),
        "key_columns": list(KEY_COLUMNS),
        "libs": libs,
        "size_bytes": total,
        "left_out": sum(left_out.values()),
        "left_out_by": left_out,
    }
    if manifest["left_out"]:
        warnings.warn(
            f"bundle size cap {max_bytes >> 20} MiB reached: left out {left_out} jobs per role "
            "(raise --max-mib or measure fewer shapes)",
            stacklevel=2,
        )
    (tmp / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def _lib_doc(name: str | None, role: str | None, pair: DevicePair, entries: list) -> dict[str, Any]:
    docs = []
    for entry in entries:
        in_devs, timer = entry_placement(entry, role)
        docs.append({
            "name": entry.name, "inputs": [list(s) for s in entry.inputs],
            "input_devices": in_devs, "timer_device": timer, "flops": entry.job.flops,
            "row": entry_row(entry, pair),
        })  # fmt: skip
    return {"file": name, "role": role, "devices": lib_devices(pair, role), "entries": docs}


# manifest fields that bundles must share to be measured as one
JOIN_FIELDS = ("version", "pair", "cuda_arch", "columns", "key_columns", "kernel_variants",
               "codegen_facts")


def join_bundles(bundles: Sequence[str | Path], out_dir: str | Path,
                 overwrite: bool = False) -> dict[str, Any]:
    """One bundle of the libraries of ``bundles`` (built for one pair); returns its manifest.

    Library ``libN.so`` of the i-th bundle becomes ``b{i}_libN.so``, and the libraries of
    the bundles alternate, so the runner's rounds interleave their rows. Bundles of another
    pair, manifest version or schema, and a row key in two bundles, are a ``ValueError``. The
    folder is written under a temporary name and renamed at the end.
    """
    if len(bundles) < 2:
        raise ValueError("join needs at least two bundles")
    mans = [_read_manifest(Path(b)) for b in bundles]
    for field in JOIN_FIELDS:
        if any(m[field] != mans[0][field] for m in mans[1:]):
            raise ValueError(f"bundles differ in {field!r}: {[str(b) for b in bundles]} "
                             "were not built for one pair and schema")  # fmt: skip
    seen: dict[tuple, str] = {}
    for b, m in zip(bundles, mans, strict=True):
        for lib in m["libs"]:
            for e in lib["entries"]:
                key = tuple(str(e["row"][c]) for c in m["key_columns"])
                if key in seen:
                    raise ValueError(f"row {dict(zip(m['key_columns'], key, strict=True))} is "
                                     f"in both {seen[key]} and {b}")  # fmt: skip
                seen[key] = str(b)
    with atomic_folder(out_dir, inputs=bundles, overwrite=overwrite) as tmp:
        renamed = []
        for i, (b, m) in enumerate(zip(bundles, mans, strict=True)):
            libs = []
            for lib in m["libs"]:
                if lib["file"] is None:  # staged copies have no library
                    libs.append(lib)
                    continue
                name = f"b{i}_{lib['file']}"
                shutil.copyfile(Path(b) / lib["file"], tmp / name)
                libs.append(dict(lib, file=name))
            renamed.append(libs)
        left_by = {r: sum(m["left_out_by"].get(r, 0) for m in mans)
                   for r in ("gpu", "cpu", "copy")}
        manifest = {**{f: mans[0][f] for f in JOIN_FIELDS}, "format": BUNDLE_FORMAT,
                    "libs": interleave(renamed),
                    "size_bytes": sum(m["size_bytes"] for m in mans),
                    "left_out": sum(left_by.values()), "left_out_by": left_by,
                    "joined": [str(b) for b in bundles]}  # fmt: skip
        (tmp / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def _read_manifest(bundle: Path) -> dict[str, Any]:
    try:
        man = json.loads((bundle / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{bundle}: not a profiling bundle ({err})") from None
    man.setdefault("kernel_variants", None)  # bundles before variants: the defaults
    man.setdefault("codegen_facts", {})  # bundles before them: none (training warns)
    missing = [f for f in (*JOIN_FIELDS, "libs") if f not in man]
    if missing:
        raise ValueError(f"{bundle}: not a profiling bundle (manifest lacks {missing})")
    man.setdefault("size_bytes", 0)
    man.setdefault("left_out_by", {})
    return man
