"""Cross-compiled artifacts for a device the host cannot run code for (Android phones).

:func:`export_for_device` writes the same artifact folder as :meth:`codl_tvm.Executable.export`
(``manifest.json``, ``params.npz``), but the library is built for the device:

- ``TVM_NDK_CC`` set (the NDK's ``aarch64-linux-androidNN-clang``): ``lib.so``, linked through
  ``tvm.support.ndk.create_shared``; the folder is ready for the phone.
- otherwise: ``lib.tar``, the device objects (``lib0.o``: the CPU kernels and VM code for
  aarch64; ``devc.o``: the imported modules, i.e. the OpenCL kernel source). The manifest's
  ``link`` entry is the command that turns it into ``lib.so`` with any aarch64 linker.
"""

from __future__ import annotations

import os
import struct
import tarfile
from pathlib import Path
from typing import Any

from .. import runtime

TAR_LIBRARY = "lib.tar"
# what tvm.support.ndk.create_shared runs, spelled out for a machine without TVM
LINK_COMMAND = ("mkdir -p objs && tar xf lib.tar -C objs && "
                "${TVM_NDK_CC:?set TVM_NDK_CC to the NDK clang} -o lib.so objs/*.o "
                "-shared -fPIC -lm")

# ELF e_machine values we name (others are reported as numbers)
ELF_MACHINES = {3: "x86", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv"}


def export_for_device(exe: Any, path: str | os.PathLike, *, weights: bool = True,
                      ndk_cc: str | None = None, overwrite: bool = False,
                      inputs: tuple[str | os.PathLike, ...] = ()) -> Path:
    """Write a deployable artifact folder for the executable's (cross-compiled) target.

    Parameters
    ----------
    exe : codl_tvm.Executable
        Built for a pair whose targets this host may not run (``android-opencl``...).
    path : path-like
        Artifact folder to write (renamed into place when complete).
    weights, overwrite, inputs
        As in :meth:`codl_tvm.Executable.export`.
    ndk_cc : str, optional
        NDK compiler; defaults to ``$TVM_NDK_CC``. Without one, a ``.tar`` is written.

    Returns
    -------
    Path
        The folder. ``manifest["library"]`` names the library file; ``manifest["link"]`` is
        set when that is a ``.tar`` still to be linked.
    """
    ndk_cc = ndk_cc or os.environ.get("TVM_NDK_CC")

    def write_library(folder: Path) -> dict[str, Any]:
        if ndk_cc:
            _export_ndk(exe.vm_exec, folder / runtime.LIBRARY, ndk_cc)
            return {"library": runtime.LIBRARY}
        exe.vm_exec.export_library(str(folder / TAR_LIBRARY))
        return {"library": TAR_LIBRARY, "link": LINK_COMMAND}

    return exe.export(path, weights=weights, write_library=write_library,
                      overwrite=overwrite, inputs=inputs)


def _export_ndk(vm_exec: Any, out: Path, ndk_cc: str) -> None:
    from tvm.support import cc, ndk

    def fcompile(output: str, objects: list[str], options: list[str] | None = None) -> None:
        old = os.environ.get("TVM_NDK_CC")
        os.environ["TVM_NDK_CC"] = ndk_cc  # ndk.create_shared reads it from the environment
        try:
            ndk.create_shared(output, objects, options)
        finally:
            if old is None:
                os.environ.pop("TVM_NDK_CC")
            else:
                os.environ["TVM_NDK_CC"] = old

    fcompile.output_format = "so"
    fcompile.get_target_triple = cc.get_target_by_dump_machine(ndk_cc)
    vm_exec.export_library(str(out), fcompile=fcompile)


def library_contents(path: str | os.PathLike) -> list[dict[str, Any]]:
    """What a ``lib.tar`` holds: per member its name, ELF machine and OpenCL kernel count.

    Parameters
    ----------
    path : path-like
        The ``.tar`` (or an artifact folder holding ``lib.tar``).
    """
    path = Path(path)
    if path.is_dir():
        path = path / TAR_LIBRARY
    rows = []
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isfile() else b""
            rows.append({"name": member.name, "size_bytes": len(data),
                         "machine": elf_machine(data),
                         "opencl_kernels": data.count(b"__kernel void")})
    return rows


def elf_machine(data: bytes) -> str | None:
    """The ELF ``e_machine`` of an object file as a name; None when not ELF."""
    if len(data) < 20 or data[:4] != b"\x7fELF":
        return None
    order = "<" if data[5] == 1 else ">"
    (machine,) = struct.unpack(order + "H", data[18:20])
    return ELF_MACHINES.get(machine, str(machine))
