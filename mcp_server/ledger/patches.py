"""What a unified diff (a git patch) touches, read without applying it.

The loop applies patches a proposals file names and the ledger stores them, so both check first that a
file is a patch at all (a ``---``/``+++`` pair with hunks, or a ``diff --git`` header) and which paths it
writes: none absolute, none with a ``..`` part, none inside ``.git``.
"""
from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Optional

_HEADER = re.compile(r"^(?:--- |\+\+\+ |rename from |rename to |copy from |copy to )(.*)$")
_DIFF_GIT = re.compile(r"^diff --git (\S+) (\S+)$")


def _unquote(p: str) -> str:
    p = p.split("\t", 1)[0].rstrip("\r")
    if len(p) >= 2 and p[0] == p[-1] == '"':
        p = p[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape", "replace")
    return p


def patch_paths(text: str) -> Optional[list[str]]:
    """The paths a unified diff names (as written, ``a/``/``b/`` prefixes kept), or None when ``text`` is not
    one: no ``diff --git`` header and no ``---``/``+++`` pair followed by a hunk."""
    paths: list[str] = []
    lines = text.splitlines()
    is_patch = False
    for i, line in enumerate(lines):
        m = _DIFF_GIT.match(line)
        if m:
            is_patch = True
            paths += [_unquote(m.group(1)), _unquote(m.group(2))]
            continue
        m = _HEADER.match(line)
        if not m:
            continue
        if line.startswith("--- "):
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if not nxt.startswith("+++ "):
                continue  # a removed line that starts with '-- ' inside a hunk
            if i + 2 < len(lines) and lines[i + 2].startswith("@@ "):
                is_patch = True
        elif line.startswith("+++ ") and not (i > 0 and lines[i - 1].startswith("--- ")):
            continue
        p = _unquote(m.group(1))
        if p != "/dev/null":
            paths.append(p)
    return sorted(set(paths)) if is_patch else None


def bad_patch_path(path: str) -> Optional[str]:
    """Why a patch may not write ``path`` (absolute, a ``..`` part, inside ``.git``), or None."""
    pp = PurePosixPath(path)
    if pp.is_absolute():
        return f"it writes the absolute path {path}"
    if ".." in pp.parts:
        return f"it writes {path}, outside its folder ('..')"
    if any(part.lower() == ".git" for part in pp.parts):
        return f"it writes {path}, inside .git"
    return None


def strip_prefix(path: str, n: int = 1) -> str:
    """The path ``git apply -p1`` writes (its first component dropped)."""
    parts = PurePosixPath(path).parts
    return str(PurePosixPath(*parts[n:])) if len(parts) > n else path
