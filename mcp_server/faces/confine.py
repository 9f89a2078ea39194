"""Where the MCP server may write (docs/ARCHITECTURE.md, "Confinement").

An agent passes paths it did not choose with care, and a client may be hostile,
so over MCP every output path an operation declares (``Operation.outputs``)
must lie inside an allowed root: ``KERNELSCOPE_ROOTS`` (``os.pathsep``-separated),
by default the server's working directory, plus the roots the MCP client declares
(the roots capability) where the transport lets the server ask for them — the
2026 protocol deprecates roots and this SDK's transports give the server no
back-channel for them, so in practice set KERNELSCOPE_ROOTS. Paths are resolved (``..`` and symlinks
followed) before the check. Over MCP an existing file (a report, a plot, an input
edited in place) is replaced only when the call says ``overwrite: true``; a ledger
is appended to, not replaced.

The CLI writes where its user says, but the rule of ``atomic.check_replace`` holds
on both faces: an output name carries its kind's extension, and a file of another
kind (a README under ``-o``) is replaced only with ``--overwrite``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from mcp_server.core import envvars
from mcp_server.core.atomic import check_replace, inside
from mcp_server.core.errors import ConfinementError

__all__ = ["ConfinementError", "check_outputs", "inside", "roots_from_env", "roots_from_uris"]


def roots_from_env() -> list[Path]:
    """The roots ``KERNELSCOPE_ROOTS`` names, else the working directory."""
    env = envvars.env("KERNELSCOPE_ROOTS") or ""
    roots = [Path(p) for p in env.split(os.pathsep) if p.strip()]
    return roots or [Path(os.getcwd())]


def roots_from_uris(uris: Iterable[str]) -> list[Path]:
    """``file://`` root URIs (the MCP roots capability) as paths; other schemes are ignored."""
    from urllib.parse import unquote, urlparse

    out = []
    for uri in uris:
        u = urlparse(str(uri))
        if u.scheme == "file" and u.path:
            out.append(Path(unquote(u.path)))
    return out


def check_outputs(op: Any, req: Any, roots: list[Path] | None) -> None:
    """Check every output path ``op`` declares before the call runs, on both faces.

    The rule itself is ``atomic.check_replace`` (the extension of the kind, no file of another kind
    replaced without ``overwrite``); ``roots`` (the MCP face) adds confinement to the roots and makes
    replacing any existing file need ``overwrite=true``; the CLI passes ``None``."""
    outputs: Mapping[str, str] = getattr(op, "outputs", {}) or {}
    overwrite = bool(getattr(req, "overwrite", False))
    for field, kind in outputs.items():
        value = getattr(req, field, None)
        if not value:
            continue
        in_place = kind.endswith("-in-place")
        if in_place:  # files edited in place unless the request names an output directory
            if getattr(req, "output_dir", None):
                continue
            kind = kind.removesuffix("-in-place")
        if kind == "md-or-json":  # the ledger export: the format decides the kind
            kind = "json" if getattr(req, "format", None) == "json" else "md"
        for one in (value if isinstance(value, (list, tuple)) else [value]):
            if roots is not None:
                _check_root(op, field, str(one), roots)
            if in_place:  # an input edited where it lies: no name rule, the engine reads it first
                if roots is not None and not overwrite and Path(os.path.expanduser(str(one))).exists():
                    raise ConfinementError(f"{op.tool}: {field}={one} would be edited in place",
                                           hint="pass output_dir to write updated copies, or overwrite=true")
                continue
            check_replace(str(one), kind, field=field, overwrite=overwrite, replace_needs_overwrite=roots is not None)
            if roots is not None and not overwrite:
                _check_side_outputs(op, field, str(one))


def _check_side_outputs(op: Any, field: str, value: str) -> None:
    """Over MCP, files an output writes beside itself (``Operation.side_outputs``) are replaced only with
    ``overwrite=true`` too: a trace set's per-rank workbooks of an earlier run under the same name."""
    pattern = (getattr(op, "side_outputs", {}) or {}).get(field)
    if not pattern:
        return
    path = Path(os.path.expanduser(value))
    from glob import escape

    found = sorted(p.name for p in path.parent.glob(pattern.format(stem=escape(path.stem), suffix=escape(path.suffix))))
    if found:
        more = f" and {len(found) - 1} more" if len(found) > 1 else ""
        raise ConfinementError(f"{op.tool}: {field}={value} would replace {found[0]}{more} beside it",
                               hint="pass overwrite=true to replace them, or choose another name")


def _check_root(op: Any, field: str, value: str, roots: list[Path]) -> None:
    shown = ", ".join(str(r) for r in roots)
    path = Path(os.path.expanduser(value))
    if not inside(path, roots):
        raise ConfinementError(
            f"{op.tool}: {field}={value} is outside the directories this server may write to ({shown})",
            hint="write inside one of them, or add the directory to KERNELSCOPE_ROOTS (or the client's roots)")
