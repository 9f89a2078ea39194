"""Every ``KERNELSCOPE_*`` environment variable the package reads, declared once.

Each has its name, how its value is read, its default and one line of meaning; docs/REFERENCE.md
lists them from here (``mcp_server.faces.reference``), and tests/test_envvars.py fails when the package
names a variable this module does not declare or reads one without ``env()``. Readers call
``env(NAME)`` for the raw text and parse it themselves (their errors name the variable, never its
value). Values are read at every call, so a test or a user can change them without restarting.

The launcher ``bin/kernelscope-mcp`` reads its own variables (docs/install.md); a C define such as
``-DKERNELSCOPE_PROBE`` is not an environment variable.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

_K, _M, _G = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class EnvVar:
    name: str
    #: how the value is read: bytes / count (K, M, G suffixes; not positive: the default), size (8G; 0, none
    #: or off: no limit), seconds, flag (0, off, no, false: off), path, paths (os.pathsep-separated), choice
    kind: str
    #: the default as a number where the code uses one (the limits, the time limits); else None
    value: int | float | None
    #: the default in words where it is not a number; beside a number, what follows it
    default: str
    meaning: str
    #: set by kernelscope for its own child processes, not by users
    internal: bool = False


def _max(name: str, value: int, kind: str, meaning: str, default: str = "") -> EnvVar:
    return EnvVar(f"KERNELSCOPE_MAX_{name}", kind, value, default, meaning)


VARS: tuple[EnvVar, ...] = (
    # where the MCP server may write, and what it runs in
    EnvVar("KERNELSCOPE_ROOTS", "paths", None, "the server's working directory",
           "over MCP, the directories outputs (and files replaced or patched) must lie in"),
    EnvVar("KERNELSCOPE_ISOLATION", "flag", None, "on",
           "over MCP, run each engine call in a supervised worker process"),
    EnvVar("KERNELSCOPE_WORKER_MEMORY", "size", 8 * _G, "",
           "address-space limit of a worker process (MCP calls, CLI runs, trace-set ranks)"),
    EnvVar("KERNELSCOPE_CALL_TIMEOUT", "seconds", 900.0, "or the call's own timeout_s + 30 s",
           "time limit of one engine call in a worker"),
    EnvVar("KERNELSCOPE_VALIDATE_MEMORY", "size", None, "half the machine's memory, at most 64 GiB",
           "resident memory the validate harness tree may hold"),
    EnvVar("KERNELSCOPE_REGEX_TIMEOUT", "seconds", 1.0, "",
           "CPU time of one match of a user pattern run by Python's re (category and block rules)"),
    EnvVar("KERNELSCOPE_FRONT", "flag", None, "on",
           "answer initialize and tools/list from the recorded SDK answers while the SDK loads"),
    # files
    EnvVar("KERNELSCOPE_SHARED", "path", None, "a checkout's _shared/, else the packaged copy",
           "a folder of your own copies of the rule and spec files (each file found there wins)"),
    EnvVar("KERNELSCOPE_LEDGER", "path", None, "./.kernelscope/ledger.db", "the ledger file when no ledger is passed"),
    EnvVar("KERNELSCOPE_CACHE_DIR", "path", None, "~/.cache/kernelscope",
           "cache of find_references (entries under refs/)"),
    # trace reading
    EnvVar("KERNELSCOPE_TRACE_GZIP", "choice", None, "the fastest installed",
           "gzip decoder of traces: isal, zlib-ng or stdlib"),
    EnvVar("KERNELSCOPE_TRACE_SPLIT", "choice", None, "split a trace of 128 MiB or more on two or more cores",
           "decode one trace in two processes: off never, force any streamable trace"),
    # the bounds of the file readers (a LimitError names the one that was hit)
    _max("TRACE_BYTES", 32 * _G, "bytes", "decompressed text of one trace"),
    _max("TRACE_RATIO", 200, "count", "decompressed / compressed bytes of a gzip trace (checked past 64 MiB)"),
    _max("TRACE_UNSTREAMED_BYTES", 256 * _M, "bytes", "a trace whose layout cannot be streamed (read whole)"),
    _max("DURATION_US", 10**12, "count", "one trace event's duration (longer, negative, non-finite: skipped and "
         "counted in the damaged-events warning)", "(11.6 days)"),
    _max("XLSX_MEMBER_BYTES", 1 * _G, "bytes", "one decompressed member of an xlsx zip"),
    _max("XLSX_TOTAL_BYTES", 4 * _G, "bytes", "all decompressed members of an xlsx"),
    _max("XLSX_RATIO", 500, "count", "decompressed / compressed bytes of one member (checked past 16 MiB)"),
    _max("XLSX_MEMBERS", 10_000, "count", "members of an xlsx zip"),
    _max("XLSX_CELLS", 50_000_000, "count", "cells of a sheet's bounding box (rows x columns, from its refs)"),
    _max("XLSX_EMPTY_CELLS", 4_000_000, "count", "empty cells of that box (or as many as the cells present); "
         "KERNELSCOPE_MAX_XLSX_CELLS set alone raises this one too"),
    _max("XLSX_STRING_BYTES", 1 * _M, "bytes", "one shared string (Excel itself stops at 32 767 characters)"),
    _max("XLSX_TEXT_BYTES", 2 * _G, "bytes", "shared-string text the sheets' cells expand to"),
    _max("BUFFER_BYTES", 256 * _M, "bytes", "a timeline probe buffer (memory-mapped; decode + analysis hold about "
         "16 x its size: 128 MiB took 2.0 GB)"),
    _max("EVENT_NAME", 200, "count", "characters of one timeline event name"),
    _max("TEXT_FILE_BYTES", 64 * _M, "bytes", "small text inputs read whole (events names, overhead JSON, rule CSVs)"),
    _max("WORLD_SIZE", 1 << 16, "count", "a trace set's world size and rank numbers (distributedInfo, file names)"),
    _max("NESTING", 64, "count", "nesting depth of a JSON or TOML document the loop, the ledger and validate read "
         "or store (proposals, specs, results, classifications)"),
    # kernelscope's own
    EnvVar("KERNELSCOPE_SCRIPT_REEXEC", "flag", None, "unset",
           "set when a scripts/ entry re-executes itself under the checkout's venv (once at most)", internal=True),
)

BY_NAME: dict[str, EnvVar] = {v.name: v for v in VARS}


def env(name: str) -> str | None:
    """The text of the declared variable ``name`` in this process's environment; None when unset."""
    if name not in BY_NAME:
        raise KeyError(f"{name} is not declared in mcp_server/core/envvars.py")
    return os.environ.get(name)


def enabled(name: str) -> bool:
    """A flag variable: off when set to 0, off, no or false (any case); on otherwise, unset included."""
    return (env(name) or "1").lower() not in ("0", "off", "no", "false")


def default(name: str) -> int | float:
    """The numeric default of the declared variable ``name``."""
    value = BY_NAME[name].value
    if value is None:
        raise KeyError(f"{name} has no numeric default in mcp_server/core/envvars.py")
    return value
