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
assert len(_SECRET_PATTERNS) == 16  # _TRIGGERS below pairs with each, in order

_SECRET_ENV = ("GITHUB_TOKEN", "GH_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN", "JIRA_API_TOKEN",
               "JIRA_PAT", "JIRA_PASSWORD")


#: Every literal spelling ``_SECRET_KEYS`` matches (the quoted-key patterns need one exactly).
_SECRET_KEY_NAMES = tuple(
    k for base in ("api{}key", "private{}token", "access{}token", "refresh{}token", "id{}token", "auth{}token",
                   "client{}secret") for k in (base.format("_"), base.format("-"), base.format(""))
) + ("authorization", "proxy-authorization", "x-api-key", "apikey", "x-auth-token", "token", "password", "passwd",
     "secret", "cookie", "set-cookie", "session", "signature", "sig")
_KEY_WORDS = ("authorization", "api-key", "api_key", "apikey", "private", "token", "password", "passwd", "secret",
              "cookie", "session", "sig", "key", "code", "auth")
#: Per pattern (same order), lowercase substrings one of which any match must contain: a pattern whose
#: triggers are all absent from the text cannot match and is not run (a 16 MB answer: ~5 s -> ~0.1 s).
_TRIGGERS: tuple[tuple[str, ...], ...] = (
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), ("github_pat_",), ("glpat-",), ("xox",), ("atatt",), ("akia",),
    ("eyj",), ("://",), ("://",), tuple(w + "=" for w in _KEY_WORDS) + ("signature=",),
    tuple(f'"{k}"' for k in _SECRET_KEY_NAMES), tuple(f"'{k}'" for k in _SECRET_KEY_NAMES),
    ("authorization",), ("x-api-key", "private-token", "x-auth-token", "cookie"),
    ("token", "password", "passwd", "api_key", "api-key", "apikey", "secret"), ("bearer", "basic", "token"),
)


_TRIGGER_SCAN: Any = None


def _any_trigger(low: str) -> bool:
    """Whether any trigger occurs in ``low``: one RE2 pass (linear, ~0.4 GB/s) when google-re2 is installed."""
    global _TRIGGER_SCAN
    if _TRIGGER_SCAN is None:
        try:
            import re2  # google-re2

            alts = sorted({t for ts in _TRIGGERS for t in ts}, key=len, reverse=True)
            _TRIGGER_SCAN = re2.compile("|".join(re.escape(t) for t in alts))
        except Exception:  # no RE2: the per-pattern substring checks decide
            _TRIGGER_SCAN = False
    if _TRIGGER_SCAN is False:
        return True
    return _TRIGGER_SCAN.search(low) is not None


def redact(text: str) -> str:
    """Remove tokens (the values of known secret variables and token-shaped strings)."""
    if not text:
        return text
    for var in _SECRET_ENV:
        val = os.environ.get(var)
        if val and len(val) >= 4:
            text = text.replace(val, "***")
    low = text.lower()
    if len(low) > 65536 and not _any_trigger(low):  # a large answer with no trigger at all: one linear scan
        return text
    for pat, triggers in zip(_SECRET_PATTERNS, _TRIGGERS):
        if not any(t in low for t in triggers):
            continue
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
    as_json = getattr(model, "model_dump_json", None)
    if as_json is not None:  # one pass over the whole answer: most answers hold no secret at all
        text = as_json()
        if redact(text) == text:
            return model
    data = dump(mode="python", by_alias=True)
    clean = redact_data(data)
    if clean == data:
        return model
    return type(model).model_validate(clean)  # type: ignore[attr-defined]


class TraceSetError(InputError):
    """A set of per-rank traces cannot be analysed together (duplicate ranks, mixed world sizes, no traces)."""
