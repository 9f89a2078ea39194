"""One error hierarchy for every engine.

Every error names the thing that is wrong (file, sheet, field) and says what to
do. Faces map ``KernelscopeError`` to a tool error (MCP) or a one-line message
and exit code 2 (CLI). Messages must never contain secrets: use ``redact``.
"""
from __future__ import annotations

import os
import re


class KernelscopeError(Exception):
    """Base of all kernelscope errors. ``str(err)`` is safe to show a user."""

    def __init__(self, message: str, *, path: str | os.PathLike | None = None, hint: str | None = None):
        self.path = str(path) if path is not None else None
        self.hint = hint
        text = message
        if self.path and self.path not in message:
            text = f"{self.path}: {message}"
        if hint:
            text = f"{text} ({hint})"
        super().__init__(redact(text))


class InputError(KernelscopeError):
    """A file or argument given by the user cannot be used."""


class FileMissingError(InputError):
    """The path does not exist, or is a directory where a file was expected."""


class TraceFormatError(InputError):
    """A trace file is not a readable PyTorch-profiler (Kineto) trace."""


class ReportFormatError(InputError):
    """A report (xlsx) lacks a sheet or column the operation needs, or is unreadable."""


class CategoriesError(InputError):
    """A categories / functional-blocks CSV is malformed (bad header, bad regex)."""


class BufferFormatError(InputError):
    """A timeline probe buffer cannot be decoded."""


class LimitError(InputError):
    """An input is over one of the bounds the readers keep (size, ratio, depth, cells); the message names the
    limit, its value and the ``KERNELSCOPE_MAX_...`` variable that raises it (``mcp_server.limits``)."""


class ToolMissingError(KernelscopeError):
    """An external program (ncu, gh, git, a GPU) is not available here."""


class SourceError(KernelscopeError):
    """A remote reference source failed (network, auth, rate limit)."""


class WriteError(KernelscopeError):
    """An output could not be written; the original file is left intact."""


class LedgerError(InputError):
    """The experiment ledger cannot be used (unreadable, newer schema, a record id that does not exist)."""


class ProposalError(InputError):
    """A loop proposals file (or one proposal in it) is malformed."""


class ChangeConflictError(KernelscopeError):
    """A file or patch the loop applies is not in the state the ledger expects (edited meanwhile)."""


_SECRET_PATTERNS = [
    re.compile(r"(gh[pousr]_[A-Za-z0-9]{16,})"),
    re.compile(r"(github_pat_[A-Za-z0-9_]{20,})"),
    re.compile(r"(?i)(authorization:\s*)(\S+(?:\s+\S+)?)"),
    re.compile(r"(?i)((?:token|password|api[_-]?key|secret)\s*[=:]\s*)([^\s,;&]+)"),
]
_SECRET_ENV = ("GITHUB_TOKEN", "GH_TOKEN", "JIRA_API_TOKEN", "JIRA_PAT", "JIRA_PASSWORD")


def redact(text: str) -> str:
    """Remove tokens (the values of known secret variables and token-shaped strings)."""
    for var in _SECRET_ENV:
        val = os.environ.get(var)
        if val and len(val) >= 4:
            text = text.replace(val, "***")
    for pat in _SECRET_PATTERNS:
        if pat.groups == 1:
            text = pat.sub("***", text)
        else:
            text = pat.sub(lambda m: m.group(1) + "***", text)
    return text
