"""CUDA kernels of a runtime-only TVM process, compiled by nvcc and cached on disk.

TVM 0.27 keeps CUDA kernels as source in exported libraries and compiles them when a library
is loaded; a process with only the TVM runtime has no compiler of its own, so
:func:`codl_tvm.runtime.enable_cuda` and the profiling bundle runner register :func:`compile_cuda`
as ``tvm_callback_cuda_compile``. Imports only the standard library, so the runtime-only bundle
runner can load it as a sibling.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

CACHE_ENV = "CODL_CUDA_CACHE"


def compile_cuda(code: str, arch: str) -> bytearray:
    """nvcc ``code`` into a fatbin for ``arch`` (``sm_90``).

    Cached under ``$CODL_CUDA_CACHE`` (unset: not cached) by source and arch, so loading many
    libraries can be warmed in parallel processes and repeated loads are free.

    Raises
    ------
    RuntimeError
        nvcc failed; the message ends with nvcc's own words.
    """
    cache = os.environ.get(CACHE_ENV)
    key = hashlib.sha256(f"{arch}\n{code}".encode()).hexdigest()
    cached = Path(cache, f"{key}.fatbin") if cache else None
    if cached is not None and cached.exists():
        return bytearray(cached.read_bytes())
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp, "k.cu"), Path(tmp, "k.fatbin")
        src.write_text(code)
        cmd = ["nvcc", "--fatbin", "-O3", f"-arch={arch}", "-o", str(out), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed on a TVM kernel: {proc.stderr.strip()[-2000:]}")
        data = out.read_bytes()
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp_file = cached.with_suffix(f".{os.getpid()}.tmp")  # another process may write it too
        tmp_file.write_bytes(data)
        os.replace(tmp_file, cached)
    return bytearray(data)
