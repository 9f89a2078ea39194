"""Shared fixtures for the find_references tests (imported by tests/test_refs_*.py).

Every test runs with proxies, tokens and checkout variables removed, HOME and the cache in a
temporary directory, and the GitHub API pointed at a closed port on 127.0.0.1, so nothing can
reach the internet even by mistake.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

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


class FakeJira:
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
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output clean
                pass

            def do_GET(self):
                u = urlparse(self.path)
                fake.requests.append({"path": u.path, "query": parse_qs(u.query),
                                      "auth": self.headers.get("Authorization")})
                if fake.status != 200:
                    return self._send(fake.status, {"errorMessages": ["You are not authenticated."], "errors": {}})
                if u.path == "/rest/api/2/serverInfo":
                    return self._send(200, {"baseUrl": fake.url, "version": "9.12.0", "versionNumbers": [9, 12, 0],
                                            "deploymentType": fake.deployment, "serverTitle": "fake"})
                if u.path == "/rest/api/2/field":
                    return self._send(200, [])
                if u.path in ("/rest/api/2/search", "/rest/api/2/search/jql", "/rest/api/3/search/jql"):
                    if fake.delay_s:
                        time.sleep(fake.delay_s)
                    body = {"issues": fake.issues}
                    if u.path == "/rest/api/2/search":
                        body.update(startAt=0, maxResults=50, total=len(fake.issues))
                    else:
                        body.update(isLast=True)
                    return self._send(200, body)
                return self._send(404, {"errorMessages": [f"no route {u.path}"]})

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def paths(self) -> list[str]:
        return [r["path"] for r in self.requests]
