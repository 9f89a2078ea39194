"""The reference-source registry: ``_shared/data-sources.md``.

The file is Markdown for people; the finder reads its first table whose header row begins
with ``key | kind`` (format documented in the file itself).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from mcp_server.core.errors import FileMissingError, InputError, is_secret_env_name
from mcp_server.core.paths import shared_path

KINDS = ("github-prs", "local-git", "jira")
COLUMNS = ("key", "kind", "repo", "env", "package", "jql_project", "enabled")
_TRUE = {"yes", "true", "1", "y", "on"}
_FALSE = {"no", "false", "0", "n", "off", ""}
_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class SourceSpec:
    key: str
    kind: str
    repo: str | None = None
    env: str | None = None
    package: str | None = None
    jql_project: str | None = None
    enabled: bool = True

    @property
    def repo_name(self) -> str | None:
        return self.repo.split("/", 1)[1] if self.repo else None


@dataclass(frozen=True)
class Registry:
    path: str
    sources: tuple[SourceSpec, ...]

    def select(self, keys: list[str] | None) -> list[SourceSpec]:
        """Enabled sources, or exactly the named ones (disabled ones too) in registry order."""
        if not keys:
            return [s for s in self.sources if s.enabled]
        known = {s.key for s in self.sources}
        wanted = {part.strip() for k in keys for part in str(k).split(",")} - {""}
        unknown = sorted(wanted - known)
        if unknown:
            raise InputError(
                f"unknown source(s) {', '.join(unknown)}", path=self.path,
                hint=f"registered: {', '.join(s.key for s in self.sources)}",
            )
        return [s for s in self.sources if s.key in wanted]


def default_registry_path() -> Path:
    return shared_path("data-sources.md")


def _cells(line: str) -> list[str]:
    s = line.strip().removeprefix("|").removesuffix("|")
    return [c.strip().strip("`").strip() for c in s.split("|")]


def parse_registry(text: str, source: str = "<string>") -> Registry:
    lines = text.splitlines()
    header_at = None
    for i, line in enumerate(lines):
        if line.lstrip().startswith("|"):
            cells = [c.lower() for c in _cells(line)]
            if len(cells) >= 2 and cells[0] == "key" and cells[1] == "kind":
                header_at = i
                break
    if header_at is None:
        raise InputError("no sources table (a Markdown table whose header begins with 'key | kind')", path=source,
                         hint="see the Format section of _shared/data-sources.md")
    header = [c.lower() for c in _cells(lines[header_at])]  # begins with key, kind (found so)
    if any(c and c not in COLUMNS for c in header):
        at = ", ".join(str(i + 1) for i, c in enumerate(header) if c and c not in COLUMNS)
        raise InputError(f"line {header_at + 1}: the sources table header has unknown columns (column {at})",
                         path=source,
                         hint=f"allowed columns: {', '.join(COLUMNS)}")
    specs: list[SourceSpec] = []
    seen: set[str] = set()
    for n, line in enumerate(lines[header_at + 1:], start=header_at + 2):
        if not line.lstrip().startswith("|"):
            break
        cells = _cells(line)
        if all(re.fullmatch(r":?-{3,}:?", c) for c in cells if c):
            continue  # the separator row
        row = dict(zip(header, cells + [""] * (len(header) - len(cells))))
        where = f"{source}:{n}"
        key, kind = row.get("key", ""), row.get("kind", "").lower()
        if not _KEY_RE.match(key):
            raise InputError("the key column is not a source key", path=where, hint="letters, digits, '-', '_', '.'")
        if key in seen:
            raise InputError(f"duplicate source key {key!r}", path=where)
        seen.add(key)
        if kind not in KINDS:
            raise InputError(f"source {key!r}: unknown kind", path=where, hint=f"one of {', '.join(KINDS)}")
        repo = row.get("repo") or None
        if repo is not None and not _REPO_RE.match(repo):
            raise InputError(f"source {key!r}: the repo column is not owner/name", path=where)
        if kind == "github-prs" and repo is None:
            raise InputError(f"source {key!r}: github-prs needs a repo (owner/name)", path=where)
        env = row.get("env") or None
        if env is not None and not _ENV_RE.match(env):
            raise InputError(f"source {key!r}: the env column is not an environment variable name", path=where)
        if env is not None and is_secret_env_name(env):
            # a registry row names where to search; echoing or sending a credential's value is never its job
            raise InputError(f"source {key!r}: env {env} names a credential variable, not a checkout path or site URL",
                             path=where, hint="name the variable holding the checkout root or the Jira site URL")
        if kind == "jira" and env is None:
            env = "JIRA_SERVER"
        en = row.get("enabled", "yes").lower()  # a row has every header column
        if en not in _TRUE | _FALSE:
            raise InputError(f"source {key!r}: the enabled column must be yes or no", path=where)
        specs.append(SourceSpec(
            key=key, kind=kind, repo=repo, env=env, package=row.get("package") or None,
            jql_project=row.get("jql_project") or None, enabled=en in _TRUE,
        ))
    if not specs:
        raise InputError("the sources table has no rows", path=source)
    return Registry(path=source, sources=tuple(specs))


def load_registry(path: str | os.PathLike | None = None) -> Registry:
    p = Path(path) if path is not None else default_registry_path()
    if not p.is_file():
        raise FileMissingError("reference-source registry not found", path=p,
                               hint="pass --registry or restore _shared/data-sources.md")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else (exc.strerror or type(exc).__name__)
        raise InputError(f"cannot read registry: {why}", path=p) from None
    return parse_registry(text, str(p))
