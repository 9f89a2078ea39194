"""Where the MCP server may write (docs/ARCHITECTURE.md, "Confinement").

An agent passes paths it did not choose with care, and a client may be hostile,
so over MCP every output path an operation declares (``Operation.outputs``)
must lie inside an allowed root: ``KERNELSCOPE_ROOTS`` (``os.pathsep``-separated),
by default the server's working directory, plus the roots the MCP client declares
(the roots capability) where the transport lets the server ask for them — the
2026 protocol deprecates roots and this SDK's transports give the server no
back-channel for them, so in practice set KERNELSCOPE_ROOTS. Paths are resolved (``..`` and symlinks
followed) before the check. An existing file is replaced only when it is an
output of the same kind (an xlsx by an xlsx, ...) or the call says
``overwrite: true``. The CLI writes where its user says and skips these checks.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from mcp_server.atomic import is_kind
from mcp_server.errors import InputError


class ConfinementError(InputError):
    """An output path outside the allowed roots, or a file the call may not replace."""


def roots_from_env(cwd: str | os.PathLike | None = None) -> list[Path]:
    env = os.environ.get("KERNELSCOPE_ROOTS", "")
    roots = [Path(p) for p in env.split(os.pathsep) if p.strip()]
    return roots or [Path(cwd or os.getcwd())]


def roots_from_uris(uris: Iterable[str]) -> list[Path]:
    """``file://`` root URIs (the MCP roots capability) as paths; other schemes are ignored."""
    from urllib.parse import unquote, urlparse

    out = []
    for uri in uris:
        u = urlparse(str(uri))
        if u.scheme == "file" and u.path:
            out.append(Path(unquote(u.path)))
    return out


def _resolved(p: str | os.PathLike) -> Path:
    return Path(os.path.realpath(os.path.expanduser(os.fspath(p))))


def inside(path: Path, roots: Iterable[Path]) -> bool:
    rp = _resolved(path)
    for root in roots:
        rr = _resolved(root)
        if rp == rr or rr in rp.parents:
            return True
    return False


def check_outputs(op: Any, req: Any, roots: list[Path]) -> None:
    """Refuse output paths outside ``roots`` and replacements of files of another kind."""
    outputs: Mapping[str, str] = getattr(op, "outputs", {}) or {}
    overwrite = bool(getattr(req, "overwrite", False))
    for field, kind in outputs.items():
        value = getattr(req, field, None)
        if not value:
            continue
        if kind.endswith("-in-place"):  # files edited in place unless the request names an output directory
            if getattr(req, "output_dir", None):
                continue
            kind = kind.removesuffix("-in-place")
        for one in (value if isinstance(value, (list, tuple)) else [value]):
            _check_one(op, field, str(one), kind, roots, overwrite)


def _check_one(op: Any, field: str, value: str, kind: str, roots: list[Path], overwrite: bool) -> None:
    shown = ", ".join(str(r) for r in roots)
    path = Path(os.path.expanduser(value))
    if not inside(path, roots):
        raise ConfinementError(
            f"{op.tool}: {field}={value} is outside the directories this server may write to ({shown})",
            hint="write inside one of them, or add the directory to KERNELSCOPE_ROOTS (or the client's roots)")
    if kind == "dir":
        if path.exists() and not path.is_dir():
            raise ConfinementError(f"{op.tool}: {field}={value} exists and is not a directory")
        return
    if path.is_dir():
        raise ConfinementError(f"{op.tool}: {field}={value} is a directory", hint=f"give a {kind} file path")
    if path.exists() and not overwrite and not is_kind(path, kind):
        raise ConfinementError(
            f"{op.tool}: {field}={value} exists and is not a {kind} file this tool would write",
            hint="choose another path, or pass overwrite=true to replace it")
