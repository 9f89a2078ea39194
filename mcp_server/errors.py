"""One error hierarchy for every engine.

Every error names the thing that is wrong (file, sheet, field) and says what to
do. Faces map ``KernelscopeError`` to a tool error (MCP) or a one-line message
and exit code 2 (CLI). Messages must never contain secrets: use ``redact``.
"""
from __future__ import annotations

import os
import re
from typing import Any, TypeVar


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


_SECRET_KEYS = (r"authorization|proxy-authorization|x-api-key|api[_-]?key|apikey|private[_-]token|x-auth-token|"
                r"access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token|token|password|passwd|secret|"
                r"client[_-]secret|cookie|set-cookie|session|signature|sig")
_SECRET_PATTERNS = [
    # token shapes: GitHub, GitLab, Slack, Atlassian API tokens, AWS access key ids, JWTs
    re.compile(r"(gh[pousr]_[A-Za-z0-9]{16,})"),
    re.compile(r"(github_pat_[A-Za-z0-9_]{20,})"),
    re.compile(r"(glpat-[A-Za-z0-9_-]{16,})"),
    re.compile(r"(xox[abprs]-[A-Za-z0-9-]{10,})"),
    re.compile(r"(ATATT[A-Za-z0-9_=+/-]{16,})"),
    re.compile(r"\b(AKIA[0-9A-Z]{16})\b"),
    re.compile(r"(eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"),
    # credentials inside a URL: scheme://user:password@host, scheme://TOKEN@host
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@\"'<>]*:)([^/\s@\"'<>]+)(?=@)"),
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)([A-Za-z0-9_.~+=-]{16,})(?=@)"),
    # query parameters: ?access_token=..., &token=..., &sig=...
    re.compile(rf"(?i)([?&;](?:{_SECRET_KEYS}|key|code|auth)=)([^&#\s\"'<>]+)"),
    # quoted keys (JSON, Python reprs): {"Authorization": "Basic ..."}, {'token': '...'}
    re.compile(rf'(?i)("(?:{_SECRET_KEYS})"\s*:\s*")((?:[^"\\]|\\.)*)(?=")'),
    re.compile(rf"(?i)('(?:{_SECRET_KEYS})'\s*:\s*')((?:[^'\\]|\\.)*)(?=')"),
    # header lines and key=value / key: value
    re.compile(r"(?i)((?:proxy-)?authorization:\s*)(\S+(?:\s+\S+)?)"),
    re.compile(r"(?i)((?:x-api-key|private-token|x-auth-token|cookie|set-cookie):\s*)(\S+)"),
    re.compile(r"(?i)((?:token|password|passwd|api[_-]?key|secret)\s*[=:]\s*)(?!\*\*\*)([^\s,;&\"'#]+)"),
    # bare schemes: Bearer xxx, Basic base64
    re.compile(r"(?i)(\b(?:bearer|basic|token)\s+)([A-Za-z0-9._~+/=-]{8,})"),
]
_SECRET_ENV = ("GITHUB_TOKEN", "GH_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN", "JIRA_API_TOKEN",
               "JIRA_PAT", "JIRA_PASSWORD")


def redact(text: str) -> str:
    """Remove tokens (the values of known secret variables and token-shaped strings)."""
    if not text:
        return text
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


def redact_data(obj: Any) -> Any:
    """``obj`` (JSON-like: dicts, lists, tuples, strings, numbers) with every string redacted."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: redact_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_data(v) for v in obj)
    return obj


M = TypeVar("M")


def redact_model(model: M) -> M:
    """A copy of a pydantic result model with every string field redacted (what a face returns)."""
    dump = getattr(model, "model_dump", None)
    if dump is None:
        return model
    data = dump(mode="python", by_alias=True)
    clean = redact_data(data)
    if clean == data:
        return model
    return type(model).model_validate(clean)  # type: ignore[attr-defined]
