"""Run a compiled codl-tvm artifact with only the TVM runtime.

Importable in a process started with ``TVM_USE_RUNTIME_LIB=1`` (no compiler library): this is
what runs on a phone, a GPU box or the H100 measurement machine. An artifact is a folder::

    lib.so          exported Relax VM executable (both devices' kernels)
    params.npz      weights (uploaded once; those the CPU kernels read packed are packed
                    once there, by the library's ``codl_prepack``: :func:`upload_params`)
    manifest.json   inputs, outputs, device pair, TVM version, plan

Command line (:func:`codl_tvm.commands.artifact.runtime_main`, ``codl-tvm run``'s arguments)::

    python -m codl_tvm.runtime ARTIFACT [--inputs x.npz] [-o out.npz] [--time] [--repeat N]
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tvm
import tvm.runtime.vm

from . import streams  # registers the stream functions split artifacts call
from .adaptive_guard import AdaptiveRunner
from .opencl_runtime import enable_opencl
from .opencl_runtime import plugin_path as opencl_plugin_path
from .outputs import ARTIFACT_FORMAT, MANIFEST, atomic_file
from .profiler.cpu_pool import pair_threads, use_cpu_threads
from .profiler.host_memory import host_tensor
from .profiler.nvcc import compile_cuda

LIBRARY = "lib.so"
PARAMS = "params.npz"
GUARD_ROUNDS = 15  # interleaved timing rounds when an artifact's alternatives are compared
ARTIFACT_VERSION = 2  # 2: ``prepack`` (weights packed at load); a runtime reads 1 and 2
READABLE_VERSIONS = (1, 2)

_DEVICE_CTORS = {"cpu": tvm.cpu, "cuda": tvm.cuda, "opencl": tvm.opencl}
ROLES = ("gpu", "cpu")  # manifest["devices"] order (codl_tvm.device.ROLES; no compiler here)


# ---- CUDA in a runtime-only process (see shared/gpu/README.md) ------------------------------
def _nvcc_compile(code: str, target: str | None = None) -> bytearray:
    """``tvm_callback_cuda_compile``: :func:`~codl_tvm.profiler.nvcc.compile_cuda` for
    ``$CODL_CUDA_ARCH``, else this GPU's arch."""
    return compile_cuda(code, os.environ.get("CODL_CUDA_ARCH") or _cuda_arch())


def _cuda_arch() -> str:
    return "sm_" + tvm.cuda(0).compute_version.replace(".", "")


def enable_cuda() -> bool:
    """Make CUDA usable in this process; returns whether a CUDA device exists.

    Loads ``libtvm_runtime_cuda.so`` (a runtime-only process does not) and, where only the
    runtime is loaded, registers ``tvm_callback_cuda_compile`` with nvcc, since TVM 0.27 keeps
    CUDA kernels as source in exported libraries and compiles them at load time.
    """
    lib = Path(tvm.__file__).parent / "lib" / "libtvm_runtime_cuda.so"
    if lib.exists() and not tvm.cuda(0).exist:
        ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
    if not tvm.cuda(0).exist:
        return False
    runtime_only = os.environ.get("TVM_USE_RUNTIME_LIB") == "1"
    if runtime_only and shutil.which("nvcc"):
        import tvm_ffi

        tvm_ffi.register_global_func("tvm_callback_cuda_compile", _nvcc_compile, override=True)
    return True


# ---- the runner -----------------------------------------------------------------------------
class Runner:
    """Runs one compiled model on its two devices.

    Parameters
    ----------
    module : tvm.runtime.Module or Executable
        The VM executable (loaded library or in-memory).
    manifest : dict
        The artifact manifest (see :func:`make_manifest`).
    params : dict[str, np.ndarray]
        CPU-side weights, uploaded once.
    """

    def __init__(self, module: Any, manifest: dict[str, Any], params: dict[str, np.ndarray]):
        streams.check()  # a bad $CODL_TVM_STREAMS: one line before anything runs
        self.manifest = manifest
        # where :func:`load` chose this runner among an artifact's alternatives: what it
        # measured ({"chosen": name, "latency_ms": {name: ms}})
        self.choice: dict[str, Any] | None = None
        self.devices = [_device(kind, index) for kind, index in manifest["devices"]]
        for dev, (kind, index) in zip(self.devices, manifest["devices"]):
            if not dev.exist:
                raise RuntimeError(f"this machine has no {kind}:{index} device for the artifact")
        self.cpu_threads = use_cpu_threads(cpu_threads(manifest))
        self.vm = tvm.runtime.vm.VirtualMachine(module, self.devices)
        self.params = (upload_params(self.vm, manifest, params, self._dev)
                       + staging_buffers(manifest, self.devices))

    def _dev(self, role: str) -> tvm.runtime.Device:
        return self.devices[0 if role == "gpu" else 1]

    def _args(self, inputs: dict[str, np.ndarray]) -> list[Any]:
        args = []
        for spec in self.manifest["inputs"]:
            if spec["name"] not in inputs:
                raise KeyError(f"missing input {spec['name']!r}; the model takes "
                               f"{[s['name'] for s in self.manifest['inputs']]}")
            value = np.asarray(inputs[spec["name"]], dtype=spec["dtype"], order="C")
            if list(value.shape) != list(spec["shape"]):
                raise ValueError(f"input {spec['name']!r} has shape {list(value.shape)}, "
                                 f"expected {spec['shape']}")
            args.append(tvm.runtime.tensor(value, self._dev(spec["role"])))
        return args + self.params

    def run(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run once; outputs as numpy arrays in model order."""
        return _flatten(self.vm["main"](*self._args(inputs)))

    def time(self, inputs: dict[str, np.ndarray], repeat: int = 20, number: int = 1) -> float:
        """Median seconds of one inference (after one discarded warm-up call)."""
        timer = self.vm.time_evaluator("main", self.devices[0], number=number, repeat=repeat)
        return float(np.median(timer(*self._args(inputs)).results))

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        return random_inputs(self.manifest, seed)


def staging_buffers(manifest: dict[str, Any], devices: list[Any]) -> list[Any]:
    """The artifact's staging tensors (CPU<->GPU copies land in and leave from them), made
    once per loaded model: pinned host memory where the GPU is CUDA, so each copy is a DMA at
    the bus's speed; plain host memory elsewhere. GPU-side ones (the landing buffers of
    :class:`~codl_tvm.passes.OverlapCopies`) are plain GPU tensors."""
    pinned = manifest["devices"][0][0] == "cuda"
    return [host_tensor(s["shape"], s["dtype"], devices[ROLES.index(s["role"])],
                        pinned and s["role"] == "cpu")
            for s in manifest.get("staging", [])]


def cpu_threads(manifest: dict[str, Any]) -> int | None:
    """Workers of TVM's CPU pool the artifact was planned for: its pair's ``num-cores``."""
    return pair_threads(manifest.get("pair"))


def random_inputs(manifest: dict[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs for every model input of ``manifest``."""
    rng = np.random.default_rng(seed)
    return {s["name"]: rng.standard_normal(s["shape"]).astype(s["dtype"])
            for s in manifest["inputs"]}


def _device(kind: str, index: int) -> tvm.runtime.Device:
    if kind not in _DEVICE_CTORS:
        raise ValueError(f"unknown device kind {kind!r}")
    return _DEVICE_CTORS[kind](index)


def _flatten(value: Any) -> list[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    out: list[np.ndarray] = []
    for item in value:
        out.extend(_flatten(item))
    return out


def load(path: str | os.PathLike, params: dict[str, np.ndarray] | None = None,
         choose: bool = True, adapt: bool = False) -> Runner:
    """Load an artifact folder written by :meth:`codl_tvm.Executable.export`; ``params``
    replaces its weights (its own, or random ones where it was exported without).

    An artifact built with alternatives (``compile(..., guard=True)``: the plan's single
    processors and its candidates) is timed here against them, and the fastest is returned
    (:func:`fastest`; its ``choice`` says what was measured), unless ``choose`` is False or
    ``params`` is given (the alternatives hold weights of their own). ``adapt``: keep
    choosing call after call (:class:`~codl_tvm.adaptive_guard.AdaptiveRunner`, which keeps
    the alternatives loaded), so a choice made for a free CPU does not outlive it."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is not a codl-tvm artifact (no {MANIFEST})") from None
    if (manifest.get("format") != ARTIFACT_FORMAT
            or manifest.get("version") not in READABLE_VERSIONS):
        raise ValueError(f"{path}: unsupported artifact format/version")
    if any(kind == "cuda" for kind, _ in manifest["devices"]):
        enable_cuda()
    if any(kind == "opencl" for kind, _ in manifest["devices"]) and not enable_opencl():
        why = ("TVM has no OpenCL runtime here (build it: tools/opencl-runtime/build.sh)"
               if opencl_plugin_path() is None else
               "the OpenCL runtime finds no device (an ICD loader? OCL_ICD_VENDORS?)")
        raise RuntimeError(f"{path} runs on OpenCL, and {why}")
    module = tvm.runtime.load_module(str(path / LIBRARY))
    if params is None and manifest.get("weights") == "random":
        params = random_weights(manifest)
    elif params is None:
        with np.load(path / PARAMS, allow_pickle=False) as npz:
            params = {k: npz[k] for k in npz.files}
    else:
        choose = False
    runner = Runner(module, manifest, params)
    alternatives = manifest.get("alternatives", [])
    if not (choose and alternatives):
        return runner
    runners = {"plan": runner}
    runners |= {a["name"]: load(path / a["dir"], choose=False) for a in alternatives}
    chosen = fastest(runners)
    return AdaptiveRunner(runners, chosen.choice) if adapt else chosen


def fastest(runners: dict[str, Runner], rounds: int = GUARD_ROUNDS) -> Runner:
    """The runner of ``runners`` with the lowest median latency, timed in interleaved rounds
    on random inputs (:func:`codl_tvm.planner.timing.interleaved`, as the benchmarks time);
    its ``choice`` records the medians. This is the guard that keeps a plan from running
    slower than its best single processor on the machine at hand (whose speeds a predictor
    fitted elsewhere may misjudge)."""
    from .planner.timing import interleaved  # numpy only: runtime-only safe

    names = list(runners)
    times = interleaved([runners[n] for n in names],
                        [runners[n].random_inputs(0) for n in names], rounds=rounds)
    latency_ms = {n: 1e3 * float(np.median(t)) for n, t in zip(names, times)}
    best = min(latency_ms, key=latency_ms.get)
    runners[best].choice = {"chosen": best, "latency_ms": latency_ms}
    return runners[best]


def stored_params(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The weights an artifact stores (``params.npz``): ``main``'s, except those
    ``codl_prepack`` makes, and the ones it makes them from."""
    prepack = manifest.get("prepack") or {"sources": [], "outputs": []}
    made = set(prepack["outputs"])
    return [p for p in manifest["params"] if p["name"] not in made] + [
        s for s in prepack["sources"] if s["name"] not in {p["name"] for p in manifest["params"]}]


def upload_params(vm: Any, manifest: dict[str, Any], params: dict[str, np.ndarray],
                  device: Callable[[str], Any], items: Callable[[Any], list] = list
                  ) -> list[Any]:
    """``main``'s weights as tensors on their devices (``device(role)``), in order; those the
    CPU kernels read packed are made once here by the artifact's ``codl_prepack`` function
    from the stored weights (:class:`codl_tvm.passes.PrepackWeights`). ``items`` lists the
    tensors of the tuple it returns (over RPC: a remote array)."""
    def upload(spec: dict[str, Any]) -> Any:
        return tvm.runtime.tensor(np.asarray(params[spec["name"]], order="C"),
                                  device(spec["role"]))

    made: dict[str, Any] = {}
    prepack = manifest.get("prepack")
    if prepack:
        packed = vm[prepack["function"]](*[upload(s) for s in prepack["sources"]])
        made = dict(zip(prepack["outputs"], items(packed), strict=True))
    return [made[p["name"]] if p["name"] in made else upload(p) for p in manifest["params"]]


def random_weights(manifest: dict[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    """Small random weights for an artifact exported without its weights (timing only)."""
    rng = np.random.default_rng(seed)
    return {p["name"]: (0.05 * rng.standard_normal(p["shape"])).astype(p["dtype"])
            for p in stored_params(manifest)}


def output_names(manifest: dict[str, Any], count: int) -> list[str]:
    """The model's output names (ONNX graph order); ``output_i`` where the model had none."""
    names = manifest.get("outputs") or []
    if len(names) != count or len(set(names)) != count:
        return [f"output_{i}" for i in range(count)]
    return list(names)


def guard_line(choice: dict[str, Any]) -> str:
    """One line of what the guard measured: ``guard: runs gpu-only (9.4 ms; plan 12.7 ms,
    cpu-only 30.9 ms)``."""
    ms = choice["latency_ms"]
    others = ", ".join(f"{n} {v:.3f} ms" for n, v in ms.items() if n != choice["chosen"])
    return f"guard: runs {choice['chosen']} ({ms[choice['chosen']]:.3f} ms; {others})"


def adapt_line(summary: dict[str, Any]) -> str:
    """One line of what an adaptive guard ran: ``guard: now plan (3 switches; calls: plan 18,
    gpu-only 2; median ms: plan 11.3, gpu-only 14.0)``."""
    calls = ", ".join(f"{n} {c}" for n, c in summary["calls"].items() if c)
    ms = ", ".join(f"{n} {v:.3f}" for n, v in summary["latency_ms"].items())
    return (f"guard: now {summary['running']} ({summary['switches']} switches; calls: {calls}; "
            f"median ms: {ms})")


def streams_line(manifest: dict[str, Any]) -> str | None:
    """Which stream functions a split artifact that calls them runs, and why: ``stream
    functions: native (built)``; None for an artifact that calls none."""
    if not (manifest.get("overlap") or manifest.get("block_copies")):
        return None
    name, reason = streams.implementation()
    return f"stream functions: {name} ({reason})"


def run_and_report(runner: Runner, inputs: str | None, output: str | None, time: bool,
                   repeat: int, where: str = "") -> None:
    """What ``run`` prints: the guard's choice and the stream functions (where they apply),
    inputs from an .npz (random when None), output shapes, the outputs saved to ``output``
    (.npz, model order), and the median latency when ``time``."""
    if runner.choice is not None:
        print(guard_line(runner.choice))
    if hasattr(runner, "chooser"):
        print("guard: keeps choosing (" + ", ".join(runner.runners) + ")")
    if line := streams_line(runner.manifest):
        print(line)
    if inputs:
        with np.load(inputs, allow_pickle=False) as npz:
            values = {k: npz[k] for k in npz.files}
    else:
        values = runner.random_inputs()
    outputs = runner.run(values)
    names = output_names(runner.manifest, len(outputs))
    for name, out in zip(names, outputs):
        print(f"{name}: shape={list(out.shape)} dtype={out.dtype}")
    if output:
        with atomic_file(output, inputs=[p for p in (inputs,) if p], suffix=".npz") as tmp:
            np.savez(tmp, **dict(zip(names, outputs)))
    if time:
        print(f"median latency{where}: {runner.time(values, repeat=repeat) * 1e3:.3f} ms")
        if hasattr(runner, "chooser"):
            print(adapt_line(runner.chooser.summary()))


if __name__ == "__main__":
    from codl_tvm.commands.artifact import runtime_main

    sys.exit(runtime_main())
