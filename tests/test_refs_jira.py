"""Jira through the real ``jira`` client against a fake Jira server on 127.0.0.1."""
from __future__ import annotations

import base64
import time

from test_refs_support import FakeJira, refs_env, write_registry  # noqa: F401  (fixture)

from mcp_server.refs import find_references
from mcp_server.refs.jira_src import build_jql, jql_escape
from mcp_server.refs.registry import SourceSpec

PAT = "jira-pat-FAKE-0123456789abcdef"
API_TOKEN = "ATATT3xFAKEcloudtoken0123456789"


def _reg(tmp, project=""):
    return write_registry(tmp / "reg.md", [f"| jira | jira | | JIRA_SERVER | | {project} | yes |"])


def test_server_dc_with_pat(refs_env, monkeypatch):
    with FakeJira("Server") as fj:
        monkeypatch.setenv("JIRA_SERVER", fj.url)
        monkeypatch.setenv("JIRA_PAT", PAT)
        res = find_references("moe_sorting", registry=_reg(refs_env, "KS"), timeout_s=5, days=14)
    sec = res.sections[0]
    assert sec.method == "live:jira" and not sec.degraded
    assert [i.id for i in sec.items] == ["KS-12", "KS-7"]
    assert sec.items[0].state == "In Progress" and sec.items[0].url == f"{fj.url}/browse/KS-12"
    assert sec.total == 2 and res.outcomes == ["jira_ticket"]
    search = [r for r in fj.requests if r["path"].startswith("/rest/api/2/search")]
    assert [r["path"] for r in search] == ["/rest/api/2/search"]
    assert search[0]["query"]["jql"] == ['project = "KS" AND text ~ "moe_sorting" AND updated >= -14d ORDER BY updated '
                                         'DESC']
    assert all(r["auth"] == f"Bearer {PAT}" for r in fj.requests)
    assert PAT not in res.model_dump_json()


def test_cloud_uses_enhanced_search_path_and_basic_auth(refs_env, monkeypatch):
    with FakeJira("Cloud") as fj:
        monkeypatch.setenv("JIRA_SERVER", fj.url + "/")
        monkeypatch.setenv("JIRA_EMAIL", "dev@example.invalid")
        monkeypatch.setenv("JIRA_API_TOKEN", API_TOKEN)
        res = find_references("moe_sorting", registry=_reg(refs_env), timeout_s=5)
    sec = res.sections[0]
    assert sec.method == "live:jira" and len(sec.items) == 2 and sec.total is None
    # jira 3.10 sends Cloud searches to the enhanced endpoint, never the removed /search
    assert "/rest/api/2/search/jql" in fj.paths() and "/rest/api/2/search" not in fj.paths()
    expect = "Basic " + base64.b64encode(f"dev@example.invalid:{API_TOKEN}".encode()).decode()
    assert fj.requests[-1]["auth"] == expect
    assert API_TOKEN not in res.model_dump_json()


def test_401_is_auth_failed_without_retry_or_leak(refs_env, monkeypatch):
    with FakeJira("Server", status=401) as fj:
        monkeypatch.setenv("JIRA_SERVER", fj.url)
        monkeypatch.setenv("JIRA_PAT", PAT)
        t0 = time.monotonic()
        res = find_references("moe_sorting", registry=_reg(refs_env), timeout_s=5)
        elapsed = time.monotonic() - t0
    sec = res.sections[0]
    assert sec.method == "url-only" and "auth failed (HTTP 401" in sec.reason
    assert sec.url.startswith(fj.url + "/issues/?jql=")
    assert len(fj.requests) == 1 and elapsed < 2  # one request, no retries
    assert PAT not in res.model_dump_json()


def test_slow_answer_times_out(refs_env, monkeypatch):
    with FakeJira("Server", delay_s=3.0) as fj:
        monkeypatch.setenv("JIRA_SERVER", fj.url)
        monkeypatch.setenv("JIRA_PAT", PAT)
        t0 = time.monotonic()
        res = find_references("moe_sorting", registry=_reg(refs_env), timeout_s=1.0)
        elapsed = time.monotonic() - t0
    sec = res.sections[0]
    assert elapsed < 1.6
    assert sec.method == "url-only" and ("timeout" in sec.reason)


def test_no_credentials_gives_browse_url(refs_env, monkeypatch):
    monkeypatch.setenv("JIRA_SERVER", "https://jira.example.invalid")
    sec = find_references('say "hi"', registry=_reg(refs_env), timeout_s=2).sections[0]
    assert sec.method == "url-only" and "no credentials" in sec.reason
    assert sec.query == 'text ~ "say \\"hi\\"" ORDER BY updated DESC'
    assert sec.url.startswith("https://jira.example.invalid/issues/?jql=text%20~%20%22say%20%5C%22hi%5C%22%22")


def test_jql_escaping():
    assert jql_escape('a\\b "c"') == 'a\\\\b \\"c\\"'
    spec = SourceSpec(key="j", kind="jira", env="JIRA_SERVER", jql_project="ROCM")
    assert build_jql(spec, "ck_gemm", None) == 'project = "ROCM" AND text ~ "ck_gemm" ORDER BY updated DESC'


def test_cached_jira_answer(refs_env, monkeypatch):
    with FakeJira("Server") as fj:
        monkeypatch.setenv("JIRA_SERVER", fj.url)
        monkeypatch.setenv("JIRA_PAT", PAT)
        reg = _reg(refs_env)
        find_references("moe_sorting", registry=reg, timeout_s=5)
        n = len(fj.requests)
        again = find_references("moe_sorting", registry=reg, timeout_s=5)
        assert len(fj.requests) == n and again.sections[0].cached
        find_references("moe_sorting", registry=reg, timeout_s=5, no_cache=True)
        assert len(fj.requests) > n


def test_site_unreachable_is_offline(refs_env, monkeypatch):
    from test_refs_support import closed_port

    monkeypatch.setenv("JIRA_SERVER", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("JIRA_PAT", PAT)
    sec = find_references("moe_sorting", registry=_reg(refs_env), timeout_s=2).sections[0]
    assert sec.method == "url-only" and sec.reason == "offline (cannot reach the site in JIRA_SERVER)"
