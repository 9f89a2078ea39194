"""Shared fixtures for the find_references tests (imported by tests/test_refs_*.py).

Every test runs with proxies, tokens and checkout variables removed, HOME and the cache in a
temporary directory, and the GitHub API pointed at a closed port on 127.0.0.1, so nothing can
reach the internet even by mistake.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from json_http import JsonServer

from mcp_server.refs.finder import search_references
from mcp_server.refs.requests import FindReferencesRequest

SCRUB = [
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
    "GITHUB_TOKEN", "GH_TOKEN", "GITHUB_SERVER_URL", "GH_HOST", "GH_ENTERPRISE_TOKEN",
    "JIRA_SERVER", "JIRA_EMAIL", "JIRA_API_TOKEN", "JIRA_PAT", "AITER_ROOT", "SGLANG_ROOT",
    "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
]


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def refs_env(monkeypatch, tmp_path):
    for var in SCRUB:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KERNELSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GITHUB_API_URL", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("NO_PROXY", "*")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for k, v in {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                 "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}.items():
        monkeypatch.setenv(k, v)
    return tmp_path


def find_refs(keyword: str, *, transport=None, gh_path: str | None = None, **fields):
    """find_references with a mock HTTP transport and a stand-in gh, which no request can name."""
    req = FindReferencesRequest(keyword=keyword, **{k: os.fspath(v) if isinstance(v, os.PathLike) else v
                                                    for k, v in fields.items()})
    return search_references(req, transport=transport, gh_path=gh_path)


def write_registry(path: Path, rows: list[str]) -> str:
    text = ("# test registry\n\n| key | kind | repo | env | package | jql_project | enabled |\n"
            "|---|---|---|---|---|---|---|\n")
    text += "".join(r + "\n" for r in rows)
    path.write_text(text)
    return str(path)


# --------------------------------------------------------------------------- git


def git(cwd: Path, *args: str, env: dict | None = None) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                       env={**os.environ, **(env or {})}, timeout=20)
    return r.stdout.strip()


def make_repo(root: Path) -> dict[str, str]:
    """A real repository: which commit mentions which keyword is returned for the asserts."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("kernels\n")
    git(root, "add", ".")
    old = {"GIT_AUTHOR_DATE": "2020-01-02T00:00:00Z", "GIT_COMMITTER_DATE": "2020-01-02T00:00:00Z"}
    git(root, "commit", "-q", "-m", "Initial import", env=old)
    (root / "csrc").mkdir()
    (root / "csrc" / "sort.cu").write_text("// sorting\n__global__ void moe_sorting_kernel() {}\nint x;\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "Add MoE_Sorting kernel for gfx942", env=old)
    msg_commit = git(root, "rev-parse", "HEAD")
    (root / "dispatch.py").write_text("import os\n\ndef pick():\n    return 'moe_sorting'\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "Wire the new path into dispatch")
    diff_commit = git(root, "rev-parse", "HEAD")
    (root / "other.py").write_text("y = 2\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "Unrelated change")
    return {"msg": msg_commit, "diff": diff_commit}


# --------------------------------------------------------------------------- fake Jira


class FakeJira(JsonServer):
    """A tiny Jira REST server on 127.0.0.1: serverInfo, field, search (Server/DC) and search/jql (Cloud)."""

    def __init__(self, deployment: str = "Server", status: int = 200, delay_s: float = 0.0,
                 issues: list[dict] | None = None):
        self.deployment = deployment
        self.status = status
        self.delay_s = delay_s
        self.issues = issues if issues is not None else [
            {"key": "KS-12", "fields": {"summary": "moe_sorting slow on MI300X", "status": {"name": "In Progress"},
                                        "updated": "2026-10-01T10:00:00.000+0000"}},
            {"key": "KS-7", "fields": {"summary": "Port moe_sorting to gfx950", "status": {"name": "Done"},
                                       "updated": "2026-09-01T10:00:00.000+0000"}},
        ]
        self.requests: list[dict] = []
        super().__init__()

    def respond(self, path, query, headers):
        self.requests.append({"path": path, "query": query, "auth": headers.get("Authorization")})
        if self.status != 200:
            return self.status, {"errorMessages": ["You are not authenticated."], "errors": {}}
        if path == "/rest/api/2/serverInfo":
            return 200, {"baseUrl": self.url, "version": "9.12.0", "versionNumbers": [9, 12, 0],
                         "deploymentType": self.deployment, "serverTitle": "fake"}
        if path == "/rest/api/2/field":
            return 200, []
        if path in ("/rest/api/2/search", "/rest/api/2/search/jql", "/rest/api/3/search/jql"):
            if self.delay_s:
                time.sleep(self.delay_s)
            body = {"issues": self.issues}
            if path == "/rest/api/2/search":
                body.update(startAt=0, maxResults=50, total=len(self.issues))
            else:
                body.update(isLast=True)
            return 200, body
        return 404, {"errorMessages": [f"no route {path}"]}

    def paths(self) -> list[str]:
        return [r["path"] for r in self.requests]


def test_a_cache_that_cannot_be_written_never_fails_a_search(tmp_path):
    """The cache only saves requests: an entry (or rate-limit file) whose name is taken by a directory makes
    the atomic write refuse it (WriteError, not an OSError), and the cache says nothing."""
    from mcp_server.refs.cache import RefCache

    cache = RefCache(tmp_path)
    entry, _ = cache._path("github", ("flash mla",))
    entry.mkdir(parents=True)
    cache.put("github", "flash mla", value={"hits": 1})
    assert cache.get("github", "flash mla") is None
    cache._limit_path("anon").mkdir()
    cache.remember_limit("anon", time.time() + 60)
    assert cache.limited_until("anon") is None
