"""Secrets never reach an output face: hostile GitHub and Jira servers on 127.0.0.1 reflect tokens in
item URLs, titles and error bodies; the result (engine, CLI --json, MCP), the cache and error text
are all clean."""
from __future__ import annotations

import base64
import json

import anyio
import pytest
from json_http import JsonServer
from test_refs_support import find_refs, refs_env, write_registry  # noqa: F401  (fixture)

from mcp_server.core.errors import KernelscopeError, SourceError, redact, redact_data, redact_model
from mcp_server.refs.models import RefItem, RefSection

GH_TOKEN = "ghp_FAKEenvTOKEN0123456789abcdefXYZ"
JIRA_TOKEN = "jira-api-FAKE-7f3a9c2e51d04b6a"
EMAIL = "dev@example.invalid"
REFLECTED = ["REFLECTEDurlPASS4242", "REFLECTEDquery9911", "REFLECTEDbearer7788", "REFLECTEDsig5566",
             "glpat-REFLECTEDgitlab123456", "REFLECTEDcookie3344"]


class Hostile(JsonServer):
    """One HTTP server on 127.0.0.1 playing GitHub's search API and a Jira site, both reflecting credentials."""

    def __init__(self) -> None:
        self.auth_seen: list[str] = []
        super().__init__()

    def respond(self, path, query, headers):
        auth = headers.get("Authorization") or ""
        self.auth_seen.append(auth)
        if path == "/search/issues":  # GitHub
            items = [
                {"number": 1, "title": f"moe_sorting fix (Authorization: Bearer {REFLECTED[2]}) {auth}",
                 "html_url": f"https://x-access-token:{REFLECTED[0]}@github.com/ROCm/aiter/pull/1",
                 "state": "open", "updated_at": "2026-11-01T00:00:00Z", "pull_request": {"merged_at": None}},
                {"number": 2, "title": "moe_sorting tune",
                 "html_url": f"https://github.com/ROCm/aiter/pull/2?access_token={REFLECTED[1]}"
                             f"&sig={REFLECTED[3]}",
                 "state": "open", "updated_at": "2026-11-01T00:00:00Z", "pull_request": {"merged_at": None}},
                {"number": 3, "title": f"moe_sorting {REFLECTED[4]}",
                 "html_url": f"https://{REFLECTED[4]}@gitlab.example/x/-/merge_requests/3",
                 "state": "open", "updated_at": "2026-11-01T00:00:00Z", "pull_request": {"merged_at": None}},
            ]
            return 200, {"total_count": 3, "incomplete_results": False, "items": items}
        if path == "/rest/api/2/serverInfo":
            return 200, {"baseUrl": self.url, "version": "9.12.0", "versionNumbers": [9, 12, 0],
                         "deploymentType": "Cloud", "serverTitle": "hostile"}
        if path == "/rest/api/2/field":
            return 200, []
        # Jira search: a 400 that echoes the request's headers, JSON-quoted
        return 400, {"errorMessages": ["Error in the JQL Query"],
                     "request": {"headers": {"Authorization": auth, "Cookie": f"JSESSIONID={REFLECTED[5]}"}}}


def _secrets() -> list[str]:
    basic = base64.b64encode(f"{EMAIL}:{JIRA_TOKEN}".encode()).decode()
    return [GH_TOKEN, JIRA_TOKEN, basic, *REFLECTED]


@pytest.fixture
def hostile(refs_env, monkeypatch):
    with Hostile() as h:
        monkeypatch.setenv("GITHUB_API_URL", h.url)
        monkeypatch.setenv("GITHUB_TOKEN", GH_TOKEN)
        monkeypatch.setenv("JIRA_SERVER", h.url)
        monkeypatch.setenv("JIRA_EMAIL", EMAIL)
        monkeypatch.setenv("JIRA_API_TOKEN", JIRA_TOKEN)
        reg = write_registry(refs_env / "reg.md", ["| aiter-upstream | github-prs | ROCm/aiter | | | | yes |",
                                                   "| jira | jira | | JIRA_SERVER | | | yes |"])
        yield h, reg


def _clean(blob: str) -> None:
    for s in _secrets():
        assert s not in blob, s


def test_engine_result_and_cache_are_redacted(hostile, refs_env):
    h, reg = hostile
    res = find_refs("moe_sorting", registry=reg, timeout_s=8, gh_path="")
    gh = next(s for s in res.sections if s.source == "aiter-upstream")
    jira = next(s for s in res.sections if s.source == "jira")
    assert gh.method == "live:rest" and [i.id for i in gh.items] == ["#1", "#2", "#3"]
    assert gh.items[0].url == "https://x-access-token:***@github.com/ROCm/aiter/pull/1"
    assert gh.items[1].url == "https://github.com/ROCm/aiter/pull/2?access_token=***&sig=***"
    assert "Authorization: ***" in gh.items[0].title
    assert jira.method == "url-only" and "JQL rejected (HTTP 400" in jira.reason
    assert any(a.startswith("Basic ") for a in h.auth_seen)  # the server did get the real credentials
    _clean(res.model_dump_json())
    cache = [f.read_text() for f in (refs_env / "cache").rglob("*") if f.is_file()]
    assert cache
    for text in cache:
        _clean(text)


def test_cli_json_and_mcp_result_are_redacted(hostile, capsys):
    from mcp import Client

    from mcp_server.faces.cli import main as cli_main
    from mcp_server.faces.server import mcp

    _h, reg = hostile
    rc = cli_main(["refs", "moe_sorting", "--registry", reg, "--json", "--timeout", "8", "--no-cache"])
    out = capsys.readouterr()
    assert rc == 0
    doc = json.loads(out.out)
    assert {s["source"] for s in doc["sections"]} == {"aiter-upstream", "jira"}
    _clean(out.out + out.err)
    rc = cli_main(["refs", "moe_sorting", "--registry", reg, "--timeout", "8", "--no-cache"])
    out = capsys.readouterr()
    _clean(out.out + out.err)

    async def go():  # the shared registry's aiter-upstream and jira rows, pointed at the hostile server
        async with Client(mcp) as c:
            return await c.call_tool("find_references", {"keyword": "moe_sorting",
                                                         "sources": ["aiter-upstream", "jira"]})

    r = anyio.run(go)
    assert not r.is_error
    secs = {s["source"]: s for s in r.structured_content["sections"]}
    assert secs["aiter-upstream"]["items"] and "JQL rejected" in secs["jira"]["reason"]
    blob = json.dumps(r.structured_content) + "".join(getattr(c, "text", "") for c in r.content)
    _clean(blob)


@pytest.mark.parametrize("text, gone", [
    ("https://x:TOKEN1234@host/p", "TOKEN1234"),
    ("https://host/p?access_token=abc123&page=2", "abc123"),
    ("https://host/p?token=t0k3n#frag", "t0k3n"),
    ('{"Authorization": "Basic ZGV2OnNlY3JldA=="}', "ZGV2OnNlY3JldA=="),
    ('{"authorization":"Bearer abc.def.ghi"}', "abc.def.ghi"),
    ("{'Authorization': 'token ghs_abcdefghijklmnop1234'}", "ghs_abcdefghijklmnop1234"),
    ('{"password": "hunter2", "user": "me"}', "hunter2"),
    ("Proxy-Authorization: Basic QUJDREVGR0g=", "QUJDREVGR0g="),
    ("cookie: JSESSIONID=abcdef", "JSESSIONID=abcdef"),
    ("ATATT3xFfGF0abcdefghijklmnopqrstuvwxyz", "ATATT3xFfGF0"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlMTIz", "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
])
def test_redact_forms(text, gone):
    out = redact(text)
    assert gone not in out and "***" in out


@pytest.mark.parametrize("text", [
    "ssh://git@github.com/ROCm/aiter", "https://github.com/ROCm/aiter/pull/812", "nvjet_sm90_tst_64x8_64x16",
    "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(...)>", "user@example.com",
    "rotary_embedding_kernel token count 64", "https://user@host.example/x",
    "proposals.toml: token: not valid TOML", "token: not valid TOML (line 3)", "api_key = not valid TOML",
    "Token embeddings take 5% of the step", "basic elementwise kernels", "token: 64 per batch",
    "the secret: nothing here", "password: required", "task-parallel mask-kernel sk-1", "hf_kernel_gemm_64x64",
])
def test_redact_keeps_ordinary_text(text):
    assert redact(text) == text


def test_error_text_and_models_are_redacted(monkeypatch):
    err = SourceError("fetch https://x:ghp_abcdefghijklmnop1234@api.github.com/x?token=zz failed: "
                      '{"Authorization": "Basic QUJDREVGR0g="}')
    assert isinstance(err, KernelscopeError)
    for s in ("ghp_abcdefghijklmnop1234", "token=zz", "QUJDREVGR0g="):
        assert s not in str(err)
    sec = RefSection(source="s", kind="github-prs", method="live:rest", degraded=False,
                     items=[RefItem(kind="pr", id="#1", url="https://h/p?access_token=abc123", title="t")])
    clean = redact_model(sec)
    assert clean.items[0].url == "https://h/p?access_token=***" and sec.items[0].url.endswith("abc123")
    same = RefSection(source="s", kind="github-prs", method="live:rest", degraded=False)
    assert redact_model(same) is same
    assert redact_data({"a": ["x?token=1", ("Bearer abcdefgh12",)], "n": 3}) == {"a": ["x?token=***",
                                                                                       ("Bearer ***",)], "n": 3}


@pytest.mark.parametrize("text, gone", [
    ("password: hunter2", "hunter2"),
    ("token: 8f3a9c2e51d04b6a", "8f3a9c2e51d04b6a"),
    ("GITHUB_TOKEN=abcdefghijkl", "abcdefghijkl"),
    ("aws_secret_access_key=wJalrXUtnFEMI", "wJalrXUtnFEMI"),
    ("Bearer abcdefghij12", "abcdefghij12"),
    ("key ASIAIOSFODNN7EXAMPLE", "ASIAIOSFODNN7EXAMPLE"),
    ("hf token hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    ("OPENAI key sk-proj-Abc123Def456Ghi789Jkl012", "sk-proj-Abc123Def456Ghi789Jkl012"),
    ("anthropic sk-ant-api03-Abc123Def456Ghi789Jkl012Mno", "sk-ant-api03-Abc123Def456Ghi789Jkl012Mno"),
    ("maps AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890abcdefghijklmnopqrstuv"),
])
def test_credential_shaped_values_after_key_words_are_redacted(text, gone):
    out = redact(text)
    assert gone not in out and "***" in out


def test_values_of_credential_variables_are_redacted_whatever_their_name(monkeypatch):
    from mcp_server.core.errors import is_secret_env_name, secret_env_names

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("JIRA_EMAIL", EMAIL)
    monkeypatch.setenv("MY_SERVICE_API_KEY", "plainwordsonly")
    monkeypatch.setenv("KS_FLAG_TOKEN", "1")  # too short to look for: every "1" would go
    monkeypatch.setenv("AITER_ROOT", "/home/dev/aiter")  # not a credential variable
    names = set(secret_env_names())
    assert {"AWS_SECRET_ACCESS_KEY", "JIRA_EMAIL", "MY_SERVICE_API_KEY", "KS_FLAG_TOKEN"} <= names
    assert "AITER_ROOT" not in names and not is_secret_env_name("AITER_ROOT") and is_secret_env_name("HF_TOKEN")
    text = (f"AWS_SECRET_ACCESS_KEY holds wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY; mail {EMAIL}; plainwordsonly; "
            "1 of 2 ranks; /home/dev/aiter")
    assert redact(text) == "AWS_SECRET_ACCESS_KEY holds ***; mail ***; ***; 1 of 2 ranks; /home/dev/aiter"
    assert redact_data({"a": [text]})["a"][0] == redact(text)
    monkeypatch.delenv("MY_SERVICE_API_KEY")  # the environment is read again when it changes
    assert "plainwordsonly" in redact("plainwordsonly")
