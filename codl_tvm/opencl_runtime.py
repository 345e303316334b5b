"""OpenCL in a TVM process: load the OpenCL runtime plugin and find an ICD loader.

The apache-tvm wheel has no OpenCL runtime. ``tools/opencl-runtime/build.sh`` builds one as a
plugin library, as the wheel's CUDA runtime is (``libtvm_runtime_cuda.so``); this module loads
it. Importable with only the TVM runtime (``TVM_USE_RUNTIME_LIB=1``).

Where the plugin is looked for, first hit wins:

1. ``$CODL_TVM_OPENCL_RUNTIME``: a library file, or a folder ``build.sh`` wrote;
2. ``libtvm_runtime_opencl.so`` beside the wheel's ``libtvm_runtime.so``;
3. ``~/.cache/codl-tvm/opencl/<apache-tvm version>/`` (``build.sh``'s default output).

``CODL_TVM_OPENCL_BUFFERS=host-ptr`` picks the build whose buffers live in host memory
(``OPENCL_ENABLE_HOST_PTR``), the data path of a GPU that shares memory with the CPU.

The OpenCL ICD loader is the system's ``libOpenCL.so(.1)``, or ``$TVM_OPENCL_LIBRARY``; where
neither is set and pyopencl's wheel (which bundles a loader, and finds the
``pocl-binary-distribution`` wheel's PoCL) is installed, its loader is used.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

import tvm

PLUGIN = {"default": "libtvm_runtime_opencl.so", "host-ptr": "libtvm_runtime_opencl-host-ptr.so"}
CACHE = Path.home() / ".cache" / "codl-tvm" / "opencl"
_loaded: dict[str, str] = {}


def tvm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("apache-tvm")
    except PackageNotFoundError:  # a source build of TVM
        return str(tvm.__version__)


def plugin_path(buffers: str | None = None) -> Path | None:
    """The OpenCL runtime plugin this process would load (None: none is installed)."""
    buffers = buffers or os.environ.get("CODL_TVM_OPENCL_BUFFERS", "default")
    if buffers not in PLUGIN:
        raise ValueError(f"CODL_TVM_OPENCL_BUFFERS={buffers!r}: expected one of {sorted(PLUGIN)}")
    name = PLUGIN[buffers]
    if env := os.environ.get("CODL_TVM_OPENCL_RUNTIME"):
        return Path(env) / name if Path(env).is_dir() else Path(env)
    for folder in (Path(tvm.__file__).parent / "lib", CACHE / tvm_version()):
        if (folder / name).is_file():
            return folder / name
    return None


def _pip_icd_loader() -> Path | None:
    """pyopencl's bundled ICD loader (it also finds the PoCL of ``pocl-binary-distribution``)."""
    import importlib.util

    spec = importlib.util.find_spec("pyopencl")
    if spec is None or spec.origin is None:
        return None
    return next(iter(sorted((Path(spec.origin).parent / ".libs").glob("libOpenCL*.so*"))), None)


def load_plugin(buffers: str | None = None) -> bool:
    """Load the OpenCL runtime plugin (and point it at an ICD loader) without touching a
    device, so a process may still fork; returns whether a plugin is loaded.

    Parameters
    ----------
    buffers : {"default", "host-ptr"}, optional
        Which build of the plugin (``$CODL_TVM_OPENCL_BUFFERS``, else ``default``). A process
        loads one; asking for the other afterwards raises ``RuntimeError``.
    """
    path = plugin_path(buffers)
    if _loaded:
        if path is not None and str(path) != _loaded["path"]:
            raise RuntimeError(f"this process already loaded {_loaded['path']}; "
                               f"{path} needs a process of its own")
        return True
    if path is None:
        return False
    if not path.is_file():
        raise FileNotFoundError(f"no OpenCL runtime plugin at {path} "
                                "($CODL_TVM_OPENCL_RUNTIME)")
    if "TVM_OPENCL_LIBRARY" not in os.environ and ctypes.util.find_library("OpenCL") is None:
        loader = _pip_icd_loader()
        if loader is not None:
            # pyopencl sets its loader up (the loader crashes finding its vendors when it is
            # dlopen-ed first by another library); TVM's dlopen then gets the same handle
            import pyopencl  # noqa: F401

            os.environ["TVM_OPENCL_LIBRARY"] = str(loader)
    ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    _loaded["path"] = str(path)
    return True


def enable_opencl(buffers: str | None = None) -> bool:
    """Make OpenCL usable in this process (:func:`load_plugin`); returns whether an OpenCL
    device exists."""
    if not load_plugin(buffers):
        return False
    try:
        return bool(tvm.opencl(0).exist)
    except tvm.error.InternalError:  # no ICD loader at all
        return False
