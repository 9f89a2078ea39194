"""The one place for atomic file output.

Every file kernelscope writes goes through here: the data is written to a temp
file in the target's directory and moved over the target with ``os.replace``,
so an interrupted or failed write leaves the original (or nothing) in place and
no temp file behind. The published file gets the target's existing mode when
it replaces one, else the ordinary ``0o666 & ~umask`` (``mkstemp`` alone would
leave it ``0o600``). ``OSError`` becomes ``WriteError`` naming the target.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterator, Union

from mcp_server.errors import WriteError

PathLike = Union[str, os.PathLike]


def default_file_mode() -> int:
    """``0o666`` minus the process umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def check_output_path(path: PathLike, what: str = "output") -> Path:
    """Refuse a directory or a path whose parent directory does not exist."""
    out = Path(path)
    if out.is_dir():
        raise WriteError(f"{what} path is a directory, expected a file name", path=out)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise WriteError(f"{what} directory does not exist", path=parent)
    return out


def new_temp(target: PathLike, suffix: str = ".tmp") -> str:
    """A closed, empty temp file beside ``target`` (the caller removes it)."""
    t = Path(target)
    parent = t.parent if str(t.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{t.name}.", suffix=suffix, dir=str(parent))
    os.close(fd)
    return tmp


def unlink_quietly(path: PathLike) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


@contextlib.contextmanager
def atomic_target(path: PathLike, what: str = "output", suffix: str = ".tmp") -> Iterator[str]:
    """Yield a temp path to write; on success publish it at ``path``.

    On any exception the temp file is removed and the target is untouched; an
    ``OSError`` is re-raised as ``WriteError``.
    """
    out = check_output_path(path, what)
    try:
        tmp = new_temp(out, suffix)
    except OSError as exc:
        raise WriteError(f"cannot write {what}: {exc.strerror or exc}", path=out) from None
    try:
        yield tmp
        try:
            mode = stat.S_IMODE(os.stat(out).st_mode)
        except OSError:
            mode = default_file_mode()
        os.chmod(tmp, mode)
        os.replace(tmp, out)
    except OSError as exc:
        unlink_quietly(tmp)
        raise WriteError(f"cannot write {what}: {exc.strerror or exc}", path=out) from None
    except BaseException:
        unlink_quietly(tmp)
        raise


def atomic_write_bytes(path: PathLike, data: bytes, what: str = "output") -> Path:
    with atomic_target(path, what) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
    return Path(path)


def atomic_write_text(path: PathLike, text: str, what: str = "output", encoding: str = "utf-8") -> Path:
    return atomic_write_bytes(path, text.encode(encoding), what)
