"""The one place for atomic file output.

Every file kernelscope writes (copies included) goes through here: the data is
written to a temp file in the target's directory, flushed to disk (``fsync``),
moved over the target with ``os.replace`` and the directory entry flushed too,
so an interrupted, killed or failed write leaves the original (or nothing) in
place, never a truncated file.

* A symlinked output path writes the link's target (atomically) and keeps the link.
* A read-only existing file (no write bit, or not writable by this user) is an
  error unless the caller passes ``force=True``; an existing path that is not a
  regular file (a device, a FIFO) is always refused.
* The published file gets the target's existing mode when it replaces one, else
  the ordinary ``0o666 & ~umask`` (``mkstemp`` alone would leave it ``0o600``).
* Temp files are named ``.NAME.<host>-<pid>.XXXXXXXX.tmp``; a write sweeps the
  ones a dead process left beside the same target (ours only: that name
  pattern, this host and a pid that no longer runs, or older than a day; the
  older ``.NAME.XXXXXXXX.tmp`` form after an hour).
* ``OSError`` becomes ``WriteError`` naming the target.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import re
import socket
import stat
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Iterable, Iterator, Optional, Union

from mcp_server.core.errors import ConfinementError, InputError, WriteError

PathLike = Union[str, os.PathLike]

NAME_KEEP = 100           # characters of the target's name kept in a temp file's name (NAME_MAX is 255)
STALE_OTHER_S = 86400.0   # a temp of another host, or of a live pid, is stale after a day
STALE_LEGACY_S = 3600.0   # a temp in the older name form (no pid) after an hour


def default_file_mode() -> int:
    """``0o666`` minus the process umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _parent(p: Path) -> Path:
    return p.parent if str(p.parent) else Path(".")


def check_output_path(path: PathLike, what: str = "output") -> Path:
    """Refuse a directory or a path whose parent directory does not exist."""
    out = Path(path)
    if out.is_dir():
        raise WriteError(f"{what} path is a directory, expected a file name", path=out)
    parent = _parent(out)
    if not parent.is_dir():
        raise WriteError(f"{what} directory does not exist", path=parent)
    return out


def resolve_output(path: PathLike, what: str = "output") -> Path:
    """The file a write to ``path`` lands in: a symlink's final target (the link is kept)."""
    out = check_output_path(path, what)
    if not out.is_symlink():
        return out
    target = Path(os.path.realpath(out))
    if target.is_symlink():
        raise WriteError(f"{what} path is a symlink loop", path=out)
    if target.is_dir():
        raise WriteError(f"{what} path is a symlink to a directory, expected a file", path=out)
    if not _parent(target).is_dir():
        raise WriteError(f"{what} path is a symlink whose target directory does not exist", path=out)
    return target


def _host_tag() -> str:
    return hashlib.sha1(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:6]


def new_temp(target: PathLike, suffix: str = ".tmp") -> str:
    """A closed, empty temp file beside ``target`` (the caller removes it or publishes it)."""
    t = Path(target)
    if t.is_symlink():
        t = Path(os.path.realpath(t))
    fd, tmp = tempfile.mkstemp(prefix=f".{t.name[:NAME_KEEP]}.{_host_tag()}-{os.getpid()}.", suffix=suffix,
                               dir=str(_parent(t)))
    os.close(fd)
    return tmp


def unlink_quietly(path: PathLike) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, someone else's
        return True
    return True


def sweep_stale_temps(target: PathLike, now: float | None = None) -> list[str]:
    """Remove temp files that killed writers left beside ``target``; returns their names."""
    t = Path(target)
    parent = _parent(t)
    name = re.escape(t.name[:NAME_KEEP])
    ours = re.compile(rf"^\.{name}\.(?:([0-9a-f]{{6}})-(\d+)\.)?[a-z0-9_]{{8}}(\.[A-Za-z0-9]{{1,12}})$")
    now = time.time() if now is None else now
    host = _host_tag()
    removed: list[str] = []
    try:
        entries = os.scandir(parent)
    except OSError:
        return removed
    with entries:
        for e in entries:
            m = ours.match(e.name)
            if not m:
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            age = now - st.st_mtime
            tag, pid = m.group(1), m.group(2)
            if pid is None:
                stale = age > STALE_LEGACY_S
            elif tag == host:
                stale = int(pid) != os.getpid() and not _pid_alive(int(pid)) or age > STALE_OTHER_S
            else:
                stale = age > STALE_OTHER_S
            if stale:
                try:
                    os.unlink(os.path.join(parent, e.name))
                    removed.append(e.name)
                except OSError:
                    pass
    return removed


_FORCED: contextvars.ContextVar[bool] = contextvars.ContextVar("kernelscope_forced_writes", default=False)


@contextlib.contextmanager
def forced_writes(on: bool = True) -> Iterator[None]:
    """Within this block every write may replace a read-only or foreign file (a call's ``overwrite=true``)."""
    token = _FORCED.set(bool(on))
    try:
        yield
    finally:
        _FORCED.reset(token)


# --------------------------------------------------------------------------- the roots of an MCP call

_ROOTS: contextvars.ContextVar[Optional[tuple[Path, ...]]] = contextvars.ContextVar("kernelscope_call_roots",
                                                                                    default=None)


@contextlib.contextmanager
def confined_to(roots: Optional[Iterable[PathLike]]) -> Iterator[None]:
    """Within this block the call is confined to ``roots`` (the MCP face sets them; ``None``: not confined, the
    CLI). Engines that write or read files beyond their declared outputs (the loop's apply and restore, a
    ledger candidate's patch) ask ``call_roots()`` and refuse paths outside them (docs/ARCHITECTURE.md,
    "Confinement")."""
    token = _ROOTS.set(None if roots is None else tuple(Path(r) for r in roots))
    try:
        yield
    finally:
        _ROOTS.reset(token)


def call_roots() -> Optional[tuple[Path, ...]]:
    """The roots this call is confined to (over MCP), or ``None`` (the CLI: its user names any path)."""
    return _ROOTS.get()


def real_path(p: PathLike) -> Path:
    """``p`` with ``~``, ``..`` and every symlink resolved (a missing tail is kept as written)."""
    return Path(os.path.realpath(os.path.expanduser(os.fspath(p))))


def inside(path: PathLike, roots: Iterable[PathLike]) -> bool:
    """Whether ``path``, resolved, is one of ``roots`` or lies under one (each resolved too)."""
    rp = real_path(path)
    for root in roots:
        rr = real_path(root)
        if rp == rr or rr in rp.parents:
            return True
    return False


def check_confined(path: PathLike, what: str) -> None:
    """Over MCP, refuse ``path`` unless it resolves inside the call's roots (a no-op on the CLI)."""
    roots = call_roots()
    if roots is None or inside(path, roots):
        return
    shown = ", ".join(str(r) for r in roots)
    raise ConfinementError(f"{what} {path} is outside the directories this server may use ({shown})",
                           hint="keep it inside one of them, or add the directory to KERNELSCOPE_ROOTS")


def _refuse_unwritable(target: Path, what: str, force: bool) -> None:
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise WriteError(f"cannot write {what}: {exc.strerror or exc}", path=target) from None
    if not stat.S_ISREG(st.st_mode):
        raise WriteError(f"{what} path exists and is not a regular file; choose another name", path=target)
    mode = stat.S_IMODE(st.st_mode)
    if force or _FORCED.get():
        return
    if not mode & 0o222 or not os.access(target, os.W_OK):
        raise WriteError(f"{what} file is read-only (mode {mode:04o}); make it writable, or force the "
                         f"overwrite (overwrite=true, CLI --overwrite)", path=target)


def _fsync_path(p: PathLike, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(p, flags)
    except OSError:
        if directory:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:  # some file systems cannot sync a directory; the file itself must be
            raise
    finally:
        os.close(fd)


def probe_writable(path: PathLike, what: str = "output", *, force: bool = False) -> Path:
    """Fail early, before an expensive build, when ``path`` cannot be written (same checks and
    errors as ``atomic_target``: missing or read-only directory, read-only file). Returns the
    file a write would land in."""
    out = resolve_output(path, what)
    _refuse_unwritable(out, what, force)
    try:
        unlink_quietly(new_temp(out))
    except OSError as exc:
        raise WriteError(f"cannot write {what}: {exc.strerror or exc}", path=out) from None
    return out


@contextlib.contextmanager
def atomic_target(path: PathLike, what: str = "output", suffix: str = ".tmp", *,
                  force: bool = False) -> Iterator[str]:
    """Yield a temp path to write; on success publish it at ``path`` (a symlink's target).

    On any exception the temp file is removed and the target is untouched; an
    ``OSError`` is re-raised as ``WriteError``. A read-only existing target is refused
    unless ``force``.
    """
    out = resolve_output(path, what)
    _refuse_unwritable(out, what, force)
    sweep_stale_temps(out)
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
        _fsync_path(tmp)
        os.replace(tmp, out)
        _fsync_path(_parent(out), directory=True)
    except OSError as exc:
        unlink_quietly(tmp)
        raise WriteError(f"cannot write {what}: {exc.strerror or exc}", path=out) from None
    except BaseException:
        unlink_quietly(tmp)
        raise


def atomic_write_bytes(path: PathLike, data: bytes, what: str = "output", *, force: bool = False) -> Path:
    with atomic_target(path, what, force=force) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
    return Path(path)


def atomic_write_text(path: PathLike, text: str, what: str = "output", encoding: str = "utf-8", *,
                      force: bool = False) -> Path:
    return atomic_write_bytes(path, text.encode(encoding), what, force=force)


def atomic_copy(src: PathLike, dst: PathLike, what: str = "copy", *, force: bool = False) -> Path:
    """Copy ``src``'s bytes to ``dst`` atomically (never a truncated ``dst``, whatever happens)."""
    import shutil

    if not Path(src).is_file():
        raise WriteError(f"cannot copy to {what}: the source is not a readable file", path=src)
    with atomic_target(dst, what, force=force) as tmp:
        shutil.copyfile(src, tmp)
    return Path(dst)


# --------------------------------------------------------------------------- kinds of existing outputs


def _head(path: Path, n: int = 512) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


#: The names an output of each kind may have (``check_output_name``). Kinds not listed take any name: a
#: directory, a ledger (a database opened and appended to), an ncu report (the runner adds ``.ncu-rep``).
KIND_SUFFIXES: dict[str, tuple[str, ...]] = {
    "xlsx": (".xlsx",), "png": (".png",), "html": (".html", ".htm"), "json": (".json",),
    "md": (".md", ".markdown", ".txt"), "md-or-json": (".md", ".markdown", ".txt", ".json"),
}

#: The first line of every Markdown file kernelscope writes (ncu select's report, the ledger export).
MD_HEADS = (b"# Candidate selection: ", b"# Experiment log")

#: Kinds whose existing file is updated, not replaced: over MCP they need no ``overwrite=true``.
APPENDED_KINDS = frozenset({"sqlite", "dir", "ncu-rep"})


class OutputPathError(InputError):
    """An output path this call may not write: a name of another kind, or a file it may not replace."""


def check_output_name(path: PathLike, kind: str, field: str = "output") -> None:
    """Refuse an output name whose extension is not its kind's (``-o report.csv`` for a workbook)."""
    want = KIND_SUFFIXES.get(kind)
    name = Path(os.fspath(path)).name
    if want is None or name.lower().endswith(want):
        return
    suffix = Path(name).suffix
    got = f"ends with {suffix}" if suffix else "has no extension"
    raise OutputPathError(f"{field}={os.fspath(path)} {got}, but what this writes there is {kind}",
                          hint=f"name it with {' or '.join(want)}, e.g. {Path(name).stem or 'out'}{want[0]}")


def check_replace(path: PathLike, kind: str, *, field: str = "output", overwrite: bool = False,
                  replace_needs_overwrite: bool = False) -> None:
    """The one rule for writing at a caller-named path, on every face (confine.py adds the MCP roots).

    The name carries the kind's extension; a directory is never replaced by a file; an existing file
    is replaced only when it is an output of the same kind (an xlsx by an xlsx) or ``overwrite``; and
    where ``replace_needs_overwrite`` (over MCP, where the caller is an agent) any existing file of a
    replaced kind needs ``overwrite``, so a call that does not say so never destroys anything."""
    p = Path(os.path.expanduser(os.fspath(path)))
    shown = os.fspath(path)
    if kind == "dir":
        if p.exists() and not p.is_dir():
            raise OutputPathError(f"{field}={shown} exists and is not a directory",
                                  hint="give a directory path, or move the file")
        return
    check_output_name(p, kind, field)
    if p.is_dir():
        raise OutputPathError(f"{field}={shown} is a directory", hint=f"give a {kind} file path")
    if not (p.exists() or p.is_symlink()) or overwrite:
        return
    if not is_kind(p, kind):
        raise OutputPathError(f"{field}={shown} exists and is not {kind} output this tool would write",
                              hint="choose another path, or pass overwrite=true (CLI --overwrite) to replace it")
    if replace_needs_overwrite and kind not in APPENDED_KINDS:
        raise OutputPathError(f"{field}={shown} exists",
                              hint="pass overwrite=true to replace it, or choose another path")


def is_kind(path: Path, kind: str) -> bool:
    """Whether the existing file at ``path`` is an output of ``kind`` (so replacing it is expected): the faces'
    replacement rule (confine.py), and engines that write files beside a declared output."""
    head = _head(path)
    if kind == "xlsx":
        try:
            with zipfile.ZipFile(path) as zf:
                return "[Content_Types].xml" in zf.namelist()
        except (zipfile.BadZipFile, OSError):
            return False
    if kind == "png":
        return head.startswith(b"\x89PNG\r\n\x1a\n")
    if kind == "html":
        low = head.lstrip().lower()
        return low.startswith(b"<!doctype html") or low.startswith(b"<html")
    if kind == "json":
        return head.lstrip()[:1] in (b"{", b"[")
    if kind == "sqlite":
        return head.startswith(b"SQLite format 3\x00")
    if kind == "md-or-json":
        return is_kind(path, "md") or (path.suffix.lower() == ".json" and is_kind(path, "json"))
    if kind == "ncu-rep":
        return path.name.endswith(".ncu-rep")  # run_ncu decides replacement itself (its own overwrite)
    if kind in ("md", "text"):  # people write Markdown too: only a report kernelscope wrote is replaced
        return path.suffix.lower() in (".md", ".markdown", ".txt") and head.lstrip().startswith(MD_HEADS)
    return False
