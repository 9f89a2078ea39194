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
        super().__init__(one_line(redact(text)))


#: C0 control characters and DEL as Python writes them in a string literal (``\n``, ``\x1b``)
_CONTROL = {c: repr(chr(c))[1:-1] for c in (*range(32), 127)}


def one_line(text: str) -> str:
    """``text`` with control characters escaped (a newline in a path is ``\n``, an ESC is ``\x1b``): an error
    stays one line, and a name cannot drive the terminal it is printed on."""
    return text.translate(_CONTROL)


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
    limit, its value and the ``KERNELSCOPE_MAX_...`` variable that raises it (``mcp_server.core.limits``)."""


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


class ConfinementError(InputError):
    """Over MCP: a path outside the allowed roots (``KERNELSCOPE_ROOTS``), or a file the call may not replace."""


class ReproError(InputError):
    """A trace cannot give a replay (no recorded shapes, nothing selected), or a directory is not a replay."""


class ChangeConflictError(KernelscopeError):
    """A file or patch the loop applies is not in the state the ledger expects (edited meanwhile)."""


_SECRET_KEYS = (r"authorization|proxy-authorization|x-api-key|api[_-]?key|apikey|private[_-]token|x-auth-token|"
                r"access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token|token|password|passwd|secret|"
                r"client[_-]secret|cookie|set-cookie|session|signature|sig")
#: A credential-shaped value after a word such as ``token:`` (prose has words there: "token: not valid"):
#: at least 6 characters holding a digit or one of ``+/=``, or 20 characters of any kind.
_CRED = r"(?:(?=[^\s,;&\"'#<>]*[0-9+/=])[^\s,;&\"'#<>]{6,}|[^\s,;&\"'#<>]{20,})"
_CRED_B64 = r"(?:(?=[A-Za-z0-9._~+/=-]*[0-9+/=])[A-Za-z0-9._~+/=-]{8,}|[A-Za-z0-9._~+/=-]{20,})"
_SECRET_PATTERNS = [
    # token shapes: GitHub, GitLab, Slack, Atlassian API tokens, AWS access key ids, JWTs, below HF/OpenAI/Google
    re.compile(r"(gh[pousr]_[A-Za-z0-9]{16,})"),
    re.compile(r"(github_pat_[A-Za-z0-9_]{20,})"),
    re.compile(r"(glpat-[A-Za-z0-9_-]{16,})"),
    re.compile(r"(xox[abprs]-[A-Za-z0-9-]{10,})"),
    re.compile(r"(ATATT[A-Za-z0-9_=+/-]{16,})"),
    re.compile(r"\b((?:AKIA|ASIA)[0-9A-Z]{16})\b"),
    re.compile(r"(eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"),
    # Hugging Face, OpenAI / Anthropic (sk-, sk-proj-, sk-ant-), Google API keys
    re.compile(r"\b(hf_[A-Za-z0-9]{30,})"),
    re.compile(r"\b(sk-(?:proj-|ant-(?:api\d\d-)?)?[A-Za-z0-9_-]{20,})"),
    re.compile(r"\b(AIza[0-9A-Za-z_-]{35})"),
    # credentials inside a URL: scheme://user:password@host, scheme://TOKEN@host
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@\"'<>]*:)([^/\s@\"'<>]+)(?=@)"),
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)([A-Za-z0-9_.~+=-]{16,})(?=@)"),
    # query parameters: ?access_token=..., &token=..., &sig=...
    re.compile(rf"(?i)([?&;](?:{_SECRET_KEYS}|key|code|auth)=)([^&#\s\"'<>]+)"),
    # quoted keys (JSON, Python reprs): {"Authorization": "Basic ...", {'token': '...'}
    re.compile(rf'(?i)("(?:{_SECRET_KEYS})"\s*:\s*")((?:[^"\\]|\\.)*)(?=")'),
    re.compile(rf"(?i)('(?:{_SECRET_KEYS})'\s*:\s*')((?:[^'\\]|\\.)*)(?=')"),
    # header lines: Authorization: <scheme> <credential>, X-Api-Key: <credential>
    re.compile(r"(?i)((?:proxy-)?authorization:\s*)((?:[A-Za-z][A-Za-z0-9-]*\s+)?[^\s\"']+)"),
    re.compile(r"(?i)((?:x-api-key|private-token|x-auth-token|cookie|set-cookie):\s*)(\S+)"),
    # NAME=value (no spaces: an assignment, any value; AWS_SECRET_ACCESS_KEY=..., password=...)
    re.compile(r"(?i)((?:token|password|passwd|passphrase|api[_-]?key|secret|secret[_-]access[_-]key|"
               r"access[_-]key)=)(?!\*\*\*)([^\s,;&\"'#]+)"),
    # key: value / key = value (a value only when it is credential-shaped; prose keeps its words)
    re.compile(r"(?i)(\b[\w-]*(?:token|password|passwd|passphrase|api[_-]?key|secret|access[_-]?key)[\w-]*"
               r"\s*(?::|\s=)\s*)(?!\*\*\*)"
               rf"({_CRED})"),
    # bare schemes: Bearer xxx, Basic base64, token xxx (credential-shaped)
    re.compile(rf"(?i)(\b(?:bearer|basic|token)\s+)({_CRED_B64})"),
]
assert len(_SECRET_PATTERNS) == 20  # _TRIGGERS below pairs with each, in order

#: Variables whose values are credentials whatever their name, besides the names ``_SECRET_NAME`` matches.
_SECRET_ENV = ("GITHUB_TOKEN", "GH_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN", "JIRA_API_TOKEN",
               "JIRA_PAT", "JIRA_PASSWORD", "JIRA_EMAIL")
#: A variable name that says its value is a credential (AWS_SECRET_ACCESS_KEY, HF_TOKEN, OPENAI_API_KEY ...).
_SECRET_NAME = re.compile(r"(?i)token|secret|passw(?:or)?d|passphrase|api_?key|access_?key|private_?key|credential|"
                          r"cookie|(?:^|_)pat$|(?:^|_)auth(?:_|$)|session_?key")
#: Values shorter than this are not looked for (a variable holding "1" must not blank every digit).
_MIN_ENV_SECRET = 6


def secret_env_names(environ: Any = None) -> list[str]:
    """The environment variables whose values are redacted: the known credential variables and every name that
    says it holds one."""
    env = os.environ if environ is None else environ
    return [k for k in env if k in _SECRET_ENV or _SECRET_NAME.search(k)]


def is_secret_env_name(name: str) -> bool:
    """Whether ``name`` is a variable whose value kernelscope treats as a credential."""
    return name.upper() in _SECRET_ENV or _SECRET_NAME.search(name) is not None


_ENV_CACHE: list[Any] = [None, []]


def _env_secrets() -> list[str]:
    """Values of the secret variables now set, longest first (a value inside another is replaced after it);
    recomputed only when the environment changed (a test or a caller may set a variable at any time)."""
    raw = getattr(os.environ, "_data", None)
    key = tuple(raw.items()) if isinstance(raw, dict) else tuple(os.environ.items())
    if key != _ENV_CACHE[0]:
        vals = {v for k in secret_env_names() if len(v := os.environ.get(k) or "") >= _MIN_ENV_SECRET}
        _ENV_CACHE[:] = [key, sorted(vals, key=len, reverse=True)]
    return _ENV_CACHE[1]


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
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), ("github_pat_",), ("glpat-",), ("xox",), ("atatt",), ("akia", "asia"),
    ("eyj",), ("hf_",), ("sk-",), ("aiza",), ("://",), ("://",), tuple(w + "=" for w in _KEY_WORDS) + ("signature=",),
    tuple(f'"{k}"' for k in _SECRET_KEY_NAMES), tuple(f"'{k}'" for k in _SECRET_KEY_NAMES),
    ("authorization",), ("x-api-key", "private-token", "x-auth-token", "cookie"),
    ("token=", "password=", "passwd=", "passphrase=", "api_key=", "api-key=", "apikey=", "secret=",
     "access_key=", "access-key=", "accesskey="),
    ("token", "password", "passwd", "passphrase", "api_key", "api-key", "apikey", "secret", "access_key",
     "access-key", "accesskey"),
    ("bearer", "basic", "token"),
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


def redact(text: str, _env: "list[str] | None" = None) -> str:
    """``text`` with secrets replaced by ``***``: the values of credential variables (``secret_env_names``) and
    credentials of known shapes (GitHub/GitLab/Slack/Atlassian/AWS tokens, JWTs, credentials in URLs and query
    strings, Authorization and cookie headers, ``password=...``, ``token: <credential>``). Ordinary words are
    kept: ``token: not valid TOML`` stays as it is. The one redaction of the package: every face, export,
    ledger row and error message goes through it."""
    if not text:
        return text
    for val in _env_secrets() if _env is None else _env:
        if val in text:
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


def redact_data(obj: Any, _env: "list[str] | None" = None) -> Any:
    """``obj`` (JSON-like: dicts, lists, tuples, strings, numbers) with every string redacted."""
    env = _env_secrets() if _env is None else _env
    if isinstance(obj, str):
        return redact(obj, env)
    if isinstance(obj, dict):
        return {k: redact_data(v, env) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_data(v, env) for v in obj)
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
