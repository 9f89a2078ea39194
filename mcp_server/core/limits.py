"""Bounds the file readers keep, each with a default real data never hits and an env variable to raise it.

A reader asks ``limit(NAME)`` for the value in force and raises ``over(NAME, ...)`` (a ``LimitError``
naming the file, the limit, the value found and the variable that raises it). Values are read from the
environment at every call, so a test or a user can change them without restarting anything.

The bounds, their defaults and what each bounds are declared in ``mcp_server.core.envvars`` (the
``KERNELSCOPE_MAX_*`` variables; docs/REFERENCE.md lists them).
"""
from __future__ import annotations

import os
import sys

from mcp_server.core import envvars
from mcp_server.core.errors import LimitError

_K, _M, _G = 1 << 10, 1 << 20, 1 << 30
_PREFIX = "KERNELSCOPE_MAX_"

#: limit name -> default, from the KERNELSCOPE_MAX_<name> declarations
DEFAULTS: dict[str, int] = {v.name.removeprefix(_PREFIX): int(v.value) for v in envvars.VARS
                            if v.name.startswith(_PREFIX) and v.value is not None}


def env_name(name: str) -> str:
    return f"{_PREFIX}{name}"


def limit(name: str) -> int:
    """The bound in force: ``KERNELSCOPE_MAX_<name>`` when set to a positive number (K/M/G suffixes), else the
    default."""
    default = DEFAULTS[name]
    text = (envvars.env(env_name(name)) or "").strip()
    if not text:
        return default
    t = text.upper().removesuffix("B")
    mult = {"K": _K, "M": _M, "G": _G, "T": 1 << 40}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in ("K", "M", "G", "T") else t
    try:
        value = int(float(num) * mult)
    except ValueError:
        return default
    return value if value > 0 else default


def human(n: int | float) -> str:
    """``1.5 GiB``-style text for byte counts."""
    n = float(n)
    for unit, size in (("GiB", _G), ("MiB", _M), ("KiB", _K)):
        if n >= size:
            return f"{n / size:.1f} {unit}".replace(".0 ", " ")
    return f"{int(n)} bytes"


def over(name: str, what: str, found: str | None = None, *, path: str | os.PathLike | None = None,
         unit: str = "") -> LimitError:
    """The error for ``what`` being over the limit ``name``: names the limit and how to raise it."""
    value = limit(name)
    shown = human(value) if unit == "bytes" else f"{value:,}"
    text = f"{what} is {found}, over the limit of {shown}" if found else f"{what} exceeds the limit of {shown}"
    return LimitError(text, path=path,
                      hint=f"if the input is genuine, raise it with {env_name(name)}=<larger value>")


# --------------------------------------------------------------------------- nesting depth of documents


def nesting(obj: object) -> int:
    """How deep lists and dicts nest in ``obj`` (a scalar: 0), without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(obj, 0)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            items: object = o.values()
        elif isinstance(o, (list, tuple)):
            items = o
        else:
            continue
        d += 1
        deepest = max(deepest, d)
        stack.extend((x, d) for x in items)  # type: ignore[attr-defined]
    return deepest


def check_nesting(obj: object, what: str, *, path: str | os.PathLike | None = None) -> object:
    """Refuse ``obj`` when it nests deeper than ``KERNELSCOPE_MAX_NESTING``; returns it."""
    d = nesting(obj)
    if d > limit("NESTING"):
        raise over("NESTING", f"{what} nesting depth", f"{d} levels" if d < 10**6 else "over a million levels",
                   path=path)
    return obj


def text_nesting(text: str) -> int:
    """How deep ``[``/``{`` nest in JSON text (brackets inside strings ignored), without parsing it."""
    import re

    depth = deepest = 0
    for ch in re.sub(r'"(?:[^"\\]|\\.)*"', "", text):
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def loads_json(text: str, what: str, *, path: str | os.PathLike | None = None) -> object:
    """``json.loads`` with the nesting bound checked first (a deep document never reaches the parser)."""
    import json

    d = text_nesting(text)
    if d > limit("NESTING"):
        raise over("NESTING", f"{what} nesting depth", f"{d} levels", path=path)
    return json.loads(text)


def loads_toml(text: str, what: str, *, path: str | os.PathLike | None = None) -> dict:
    """``tomllib.loads`` bounded in nesting depth (the parser recurses: a deep document is a LimitError, never a
    RecursionError). Syntax errors are ``tomllib.TOMLDecodeError`` (a ValueError) as usual."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the tomli backport, a declared dependency there
        import tomli as tomllib

    try:
        doc = tomllib.loads(text)
    except RecursionError:
        raise over("NESTING", f"{what} nesting depth", "deeper than the TOML parser can follow",
                   path=path) from None
    check_nesting(doc, what, path=path)
    return doc


# --------------------------------------------------------------------------- process address space

#: the address-space limit of a worker process (MCP calls, trace-set ranks) unless configured
DEFAULT_MEMORY = int(envvars.default("KERNELSCOPE_WORKER_MEMORY"))


def parse_size(text: str, variable: "str | None" = None) -> int:
    """``8G``, ``512M``, ``1024`` (bytes) -> bytes. ``variable``: the environment variable ``text`` came from; its
    error then names the variable, never the value (no environment value reaches an error)."""
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in "KMGT" and t[-1:] else t
    what = f"{variable} (a memory limit)" if variable else f"memory limit {text!r}"
    try:
        value = int(float(num) * mult)
    except (ValueError, OverflowError):
        raise LimitError(f"{what} is not a size", hint="use e.g. 8G, 512M") from None
    if value <= 0:
        raise LimitError(f"{what} must be positive")
    return value


def memory_limit(text: "str | None" = None) -> "int | None":
    """Bytes of address space for a worker: ``text`` (e.g. 8G; 0, none or off for no limit), else
    ``KERNELSCOPE_WORKER_MEMORY``, else ``DEFAULT_MEMORY``."""
    raw = (text if text is not None else envvars.env("KERNELSCOPE_WORKER_MEMORY") or "").strip()
    if raw.lower() in ("0", "none", "off"):
        return None
    return parse_size(raw, None if text is not None else "KERNELSCOPE_WORKER_MEMORY") if raw else DEFAULT_MEMORY


def env_seconds(variable: str, default: float) -> float:
    """A time limit in seconds from ``variable`` (unset: ``default``); a value that is not a positive number is a
    ``LimitError`` naming the variable (its value is never shown)."""
    import math

    raw = (envvars.env(variable) or "").strip()
    if not raw:
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise LimitError(f"{variable} is not a positive number of seconds", hint=f"unset it for {default:g} s")
    return value


def apply_memory_limit(limit: "int | None") -> None:
    """Cap this process's address space (Linux; a no-op where unsupported)."""
    if not limit:
        return
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # pragma: no cover - platform without RLIMIT_AS
        pass


def die_with_parent(parent_pid: "int | None" = None) -> None:
    """Have the kernel kill this process when its parent dies (Linux ``PR_SET_PDEATHSIG``; a no-op elsewhere).

    A trace-set rank worker calls it first, so a supervised call that is killed (time limit, cancel)
    takes its rank workers with it. ``parent_pid``: the pid that started this process; when it is no
    longer the parent (it died before this call), exit at once."""
    import signal

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # pragma: no cover - no prctl
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)  # the parent died before the signal was armed
