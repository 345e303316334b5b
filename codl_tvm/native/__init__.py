"""Native versions of the runtime functions a split model calls, built where they run.

``streams.cc`` holds :mod:`codl_tvm.streams`'s stream functions and 2-D copy as TVM FFI
functions in C++ (the C ABI of ``tvm/ffi/c_api.h`` only). A split op calls five of them from
the Relax VM; as Python functions each call holds the GIL and makes several FFI calls of its
own, natively it is the CUDA calls alone. The file is compiled on first use with the machine's
C++ compiler (``$CXX``, else ``c++`` / ``g++`` / ``clang++``) against the TVM FFI headers of
the installed ``apache-tvm-ffi`` (a runtime-only TVM has them too), as TVM compiles its CUDA
kernels where they load, and cached by source, compiler and TVM FFI version under
``$CODL_TVM_CACHE/native`` (default ``~/.cache/codl-tvm/native``). It is written under a
temporary name and renamed into place, so processes that build it at once do not collide.

Imports only the standard library and ``tvm_ffi``: the runtime-only runner loads it.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("streams.cc")
CACHE_ENV = "CODL_TVM_CACHE"
COMPILERS = ("c++", "g++", "clang++")
FLAGS = ("-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden")
_loaded: dict[str, ctypes.CDLL] = {}


def cache_folder() -> Path:
    """``$CODL_TVM_CACHE/native``, else ``~/.cache/codl-tvm/native``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) / "native" if env else Path.home() / ".cache" / "codl-tvm" / "native"


def compiler() -> str | None:
    """The C++ compiler this process would build with (None: none is installed)."""
    if env := os.environ.get("CXX"):
        return shutil.which(env)
    return next((path for name in COMPILERS if (path := shutil.which(name))), None)


def _ffi_dirs() -> tuple[Path, Path, str]:
    """TVM FFI's include and library folders, and its version."""
    import tvm_ffi

    root = Path(tvm_ffi.__file__).parent
    return root / "include", root / "lib", str(getattr(tvm_ffi, "__version__", "?"))


def library_path(source: Path = SOURCE) -> Path:
    """Where the build of ``source`` for this compiler and TVM FFI is cached."""
    version = _ffi_dirs()[2]
    key = hashlib.sha256(
        "\n".join([source.read_text(), str(compiler()), version, *FLAGS]).encode()
    ).hexdigest()[:16]
    return cache_folder() / f"lib{source.stem}-{key}.so"


def build(source: Path = SOURCE) -> Path:
    """Compile ``source`` (once; later calls return the cached library).

    Raises
    ------
    RuntimeError
        No C++ compiler, or it failed; the message ends with the compiler's own words.
    """
    out = library_path(source)
    if out.exists():
        return out
    cxx = compiler()
    if cxx is None:
        raise RuntimeError(f"no C++ compiler to build {source.name} (set CXX, or install g++)")
    include, lib, _ = _ffi_dirs()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    # libtvm_ffi.so is found by its soname in the process that loads it (tvm_ffi loaded it)
    cmd = [cxx, *FLAGS, f"-I{include}", str(source), f"-L{lib}", "-ltvm_ffi", "-ldl", "-o", tmp]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building {source.name} failed: {proc.stderr.strip()[-2000:]}")
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return out


def register_streams(prefix: str) -> Path:
    """Build (if needed) and load ``streams.cc``, registering its functions as ``prefix`` +
    ``begin``, ``copies_wait_for_kernels``, ``kernels_wait_for_copies``,
    ``host_waits_for_copies``, ``end`` and ``copy_block``; returns the library's path."""
    path = build(SOURCE)
    lib = _loaded.get(str(path))
    if lib is None:
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        lib.codl_register_streams.argtypes = [ctypes.c_char_p]
        lib.codl_register_streams.restype = ctypes.c_int
        _loaded[str(path)] = lib
    if lib.codl_register_streams(prefix.encode()) != 0:
        raise RuntimeError(f"registering {path.name}'s functions failed")
    return path
