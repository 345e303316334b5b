"""Writing outputs without destroying anything: the one place every command writes through.

Rules (one table of checks, applied to every file and folder a command writes):

- a file or folder is built under a temporary name beside its destination and renamed into
  place only when complete, so a failure leaves nothing half-written;
- the working directory, any folder above it, a filesystem root and the home folder are never
  an output folder, and no output may be, hold, or sit above an input of the command;
- an existing non-empty folder is replaced only when it is a codl-tvm folder (it holds a
  ``manifest.json`` that codl-tvm wrote) and the caller asked to overwrite it; its old
  contents are moved aside first and deleted only once the new folder is in place;
- an existing file is replaced (atomically) unless it is an input or a folder.

Nothing here imports TVM: the planner and the runtime-only runner use it too.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# manifest "format" of the folders codl-tvm writes: artifacts and profiling bundles
ARTIFACT_FORMAT = "codl-tvm-artifact"
BUNDLE_FORMAT = "codl-tvm-bundle"
MANIFEST = "manifest.json"


class OutputError(ValueError):
    """An output path that would destroy something; the message names the path and why."""


def _resolved(path: str | os.PathLike) -> Path:
    return Path(os.path.abspath(os.path.expanduser(str(path)))).resolve()


def _is_within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def _protected_folder_reason(folder: Path, inputs: Iterable[Path]) -> str | None:
    """Why ``folder`` may never be replaced, or None."""
    cwd = Path.cwd().resolve()
    checks: list[tuple[bool, str]] = [
        (folder == Path(folder.anchor), "it is a filesystem root"),
        (folder == Path.home().resolve(), "it is the home folder"),
        (_is_within(cwd, folder), "it is the working directory or holds it"),
    ]
    checks += [(_is_within(i, folder), f"it holds the input {i}") for i in inputs]
    return next((why for bad, why in checks if bad), None)


def is_own_folder(folder: str | os.PathLike) -> bool:
    """True when ``folder`` holds a ``manifest.json`` that codl-tvm wrote."""
    try:
        doc = json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    # bundles written before they carried a format are known by their schema keys
    return isinstance(doc, dict) and (doc.get("format") in (ARTIFACT_FORMAT, BUNDLE_FORMAT)
                                      or {"key_columns", "libs"} <= doc.keys())


def check_output_file(path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """Check that ``path`` may be written as a file; returns it resolved.

    Raises
    ------
    OutputError
        ``path`` is a folder, or one of ``inputs``.
    """
    out = _resolved(path)
    if out.is_dir():
        raise OutputError(f"output {path} is a folder; name a file")
    if any(out == _resolved(i) for i in inputs):
        raise OutputError(f"output {path} is an input of the command; name another file")
    return out


def check_output_folder(path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (),
                        overwrite: bool = False) -> Path:
    """Check that ``path`` may be created (or, with ``overwrite``, replaced) as a folder.

    Returns
    -------
    Path
        ``path`` resolved.

    Raises
    ------
    OutputError
        ``path`` is protected (see the module's rules), is a file, or is a non-empty folder
        that codl-tvm did not write or that ``overwrite`` does not allow to replace.
    """
    out = _resolved(path)
    why = _protected_folder_reason(out, [_resolved(i) for i in inputs])
    if why:
        raise OutputError(f"refusing to write the folder {path}: {why}")
    if out.exists() and not out.is_dir():
        raise OutputError(f"output {path} is a file; name a folder")
    if out.is_dir() and any(out.iterdir()):
        if not is_own_folder(out):
            raise OutputError(f"output folder {path} exists and is not a codl-tvm folder; "
                              "name a new folder")
        if not overwrite:
            raise OutputError(f"output folder {path} exists; pass --overwrite to replace it")
    return out


@contextmanager
def atomic_folder(path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (),
                  overwrite: bool = False) -> Iterator[Path]:
    """Yield a new temporary sibling of ``path`` to fill; rename it into place on success.

    The checks of :func:`check_output_folder` run first. On an exception the temporary folder
    (which this function made) is removed and ``path`` is left as it was.
    """
    out = check_output_folder(path, inputs, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial"))
    _as_created(tmp, 0o777)
    try:
        yield tmp
        _swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap_in(new: Path, out: Path) -> None:
    """Rename ``new`` to ``out``; an existing codl-tvm folder there is moved aside, then
    deleted once ``new`` is in place (an empty folder is simply replaced)."""
    if not (out.is_dir() and any(out.iterdir())):
        os.replace(new, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
    os.replace(out, old / out.name)
    try:
        os.replace(new, out)
    except BaseException:
        os.replace(old / out.name, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_file(path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (),
                suffix: str = "") -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write; it replaces ``path`` on success.

    ``suffix`` ends the temporary name, for writers that choose a format by extension
    (``numpy.savez``, matplotlib).
    """
    out = check_output_file(path, inputs)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=f".tmp{suffix}")
    os.close(fd)
    tmp = Path(name)
    _as_created(tmp, 0o666)
    try:
        yield tmp
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _as_created(path: Path, mode: int) -> None:
    """Give a temporary file or folder the mode a plain create would (the umask's), not the
    private 0600 / 0700 of ``tempfile``: the output is the user's, not a secret."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, mode & ~umask)


def write_text(path: str | os.PathLike, text: str,
               inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """Write ``text`` to ``path`` atomically; returns ``path`` as a Path."""
    with atomic_file(path, inputs) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json(path: str | os.PathLike, doc: Any, inputs: Iterable[str | os.PathLike] = (),
               dumps: Callable[[Any], str] | None = None) -> Path:
    """Write ``doc`` as JSON (indented, newline-terminated unless ``dumps`` is given)."""
    text = dumps(doc) if dumps else json.dumps(doc, indent=2) + "\n"
    return write_text(path, text, inputs)
