"""GitHub PR search: REST through httpx.MockTransport, gh through a stand-in executable."""
from __future__ import annotations

import json
import sys
import time

import httpx
import pytest
from test_refs_support import find_refs, refs_env, write_registry  # noqa: F401  (fixture)

from mcp_server.core.errors import InputError
from mcp_server.refs import find_references

PR_ITEMS = [
    {"number": 812, "title": "Optimize moe_sorting for large token counts", "html_url": "https://github.com/ROCm/aiter/pull/812",
     "state": "closed", "updated_at": "2026-10-02T08:00:00Z", "pull_request": {"merged_at": "2026-10-01T00:00:00Z"}},
    {"number": 901, "title": "[WIP] moe_sorting: gfx950 path", "html_url": "https://github.com/ROCm/aiter/pull/901",
     "state": "open", "draft": True, "updated_at": "2026-11-02T08:00:00Z", "pull_request": {"merged_at": None}},
    {"number": 777, "title": "fix typo near moe_sorting", "html_url": "https://github.com/ROCm/aiter/pull/777",
     "state": "closed", "updated_at": "2026-08-02T08:00:00Z", "pull_request": {"merged_at": None}},
]


@pytest.fixture
def reg(refs_env):
    return write_registry(refs_env / "reg.md", ["| aiter-upstream | github-prs | ROCm/aiter | | | | yes |"])


def run(reg, transport, **kw):
    kw.setdefault("timeout_s", 2.0)
    return find_refs("moe_sorting", registry=reg, transport=transport, gh_path="", **kw)


def test_rest_results_and_query(reg, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_FAKEtoken0123456789abcdefXYZ")
    seen = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, json={"total_count": 3, "incomplete_results": False, "items": PR_ITEMS},
                              headers={"x-ratelimit-remaining": "29", "x-ratelimit-reset": str(int(time.time()) + 60)})

    res = run(reg, httpx.MockTransport(handler), days=30)
    sec = res.sections[0]
    assert sec.method == "live:rest" and sec.total == 3 and not sec.incomplete
    assert [i.id for i in sec.items] == ["#812", "#901", "#777"]
    assert [i.state for i in sec.items] == ["merged", "draft", "closed"]
    assert sec.items[0].url == "https://github.com/ROCm/aiter/pull/812"
    assert res.outcomes == ["upstream_pr"]
    req = seen[0]
    assert req.url.path == "/search/issues"
    q = req.url.params["q"]
    assert q.startswith("moe_sorting repo:ROCm/aiter is:pr updated:>=") and len(q) <= 256
    assert int(req.url.params["per_page"]) == 10
    assert req.headers["Authorization"] == "Bearer ghp_FAKEtoken0123456789abcdefXYZ"
    assert "ghp_FAKE" not in res.model_dump_json()
    assert "gh disabled" in sec.reason  # the preferred way (gh) did not answer: said so


def test_rest_rate_limited_is_remembered(reg):
    reset = int(time.time()) + 120
    calls = []

    def handler(req):
        calls.append(req)
        return httpx.Response(403, json={"message": "API rate limit exceeded for 127.0.0.1."},
                              headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)})

    t = httpx.MockTransport(handler)
    sec = run(reg, t).sections[0]
    assert sec.method == "url-only" and sec.degraded
    assert "rate limited until" in sec.reason and "HTTP 403" in sec.reason
    assert sec.rate_limit_reset == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(reset))
    assert sec.url.startswith("https://github.com/ROCm/aiter/pulls?q=is%3Apr+moe_sorting")
    # a later call (even with --no-cache) does not ask GitHub again before the reset
    sec2 = run(reg, t, no_cache=True).sections[0]
    assert len(calls) == 1
    assert "remembered" in sec2.reason and sec2.method == "url-only"


def test_rest_remaining_zero_on_success_blocks_next_call(reg):
    calls = []

    def handler(req):
        calls.append(req)
        return httpx.Response(200, json={"total_count": 0, "incomplete_results": False, "items": []},
                              headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(time.time()) + 50)})

    t = httpx.MockTransport(handler)
    first = run(reg, t, no_cache=True).sections[0]
    assert first.method == "live:rest" and first.items == [] and first.rate_limit_reset
    second = run(reg, t, no_cache=True).sections[0]
    assert len(calls) == 1 and second.method == "url-only"


def test_rest_422(reg):
    def handler(req):
        return httpx.Response(422, json={"message": "Validation Failed",
                                         "errors": [{"message": "The search is longer than 256 characters."}]})

    sec = run(reg, httpx.MockTransport(handler)).sections[0]
    assert sec.method == "url-only"
    assert "HTTP 422" in sec.reason and "longer than 256" in sec.reason


def test_rest_timeout(reg):
    def handler(req):
        raise httpx.ReadTimeout("read timed out", request=req)

    res = run(reg, httpx.MockTransport(handler))
    sec = res.sections[0]
    assert sec.method == "url-only" and "timeout" in sec.reason
    assert res.outcomes == ["unknown"]


def test_rest_malformed_json(reg):
    def handler(req):
        return httpx.Response(200, content=b"{not json", headers={"content-type": "application/json"})

    sec = run(reg, httpx.MockTransport(handler)).sections[0]
    assert sec.method == "url-only" and "malformed JSON" in sec.reason


def test_rest_incomplete_results_flagged(reg):
    def handler(req):
        return httpx.Response(200, json={"total_count": 40, "incomplete_results": True, "items": PR_ITEMS[:1]})

    res = run(reg, httpx.MockTransport(handler))
    sec = res.sections[0]
    assert sec.incomplete and "incomplete_results" in sec.reason
    assert any(w.code == "incomplete" for w in res.warnings)


def test_rest_401_bad_token_is_redacted(reg, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_BADtokenAAAAAAAAAAAAAAAAAAAA")

    def handler(req):
        return httpx.Response(401, json={"message": "Bad credentials"})

    res = run(reg, httpx.MockTransport(handler))
    sec = res.sections[0]
    assert "auth failed" in sec.reason
    assert "ghp_BAD" not in res.model_dump_json()


def test_cache_saves_requests_and_no_cache_bypasses(reg, refs_env):
    calls = []

    def handler(req):
        calls.append(req)
        return httpx.Response(200, json={"total_count": 1, "incomplete_results": False, "items": PR_ITEMS[:1]})

    t = httpx.MockTransport(handler)
    a = run(reg, t).sections[0]
    b = run(reg, t).sections[0]
    assert len(calls) == 1 and not a.cached and b.cached and b.items == a.items
    run(reg, t, no_cache=True)
    assert len(calls) == 2
    # a different query is a different key
    find_refs("ck_gemm", registry=reg, transport=t, gh_path="", timeout_s=2)
    assert len(calls) == 3
    files = list((refs_env / "cache" / "refs").glob("aiter-upstream-*.json"))
    assert len(files) == 2 and not list((refs_env / "cache" / "refs").glob("*.tmp"))


def test_overall_bound_returns_what_arrived(refs_env):
    reg = write_registry(refs_env / "reg.md", [
        "| aiter-upstream | github-prs | ROCm/aiter | | | | yes |",
        "| jira | jira | | JIRA_SERVER | | | yes |",
    ])

    def slow(req):
        time.sleep(2.5)  # MockTransport ignores httpx timeouts: only the overall bound stops this
        return httpx.Response(200, json={"items": []})

    t0 = time.monotonic()
    res = find_refs("moe_sorting", registry=reg, transport=httpx.MockTransport(slow), gh_path="", timeout_s=1.0)
    assert time.monotonic() - t0 < 1.6
    gh, jira = res.sections
    assert gh.method == "url-only" and "no answer within the 1s bound" in gh.reason
    assert jira.method == "unavailable" and "JIRA_SERVER not set" in jira.reason
    assert any(w.code == "timeout" for w in res.warnings)


def test_keyword_validation(reg):
    with pytest.raises(InputError, match="at most 128"):
        find_references("x" * 200, registry=reg)
    with pytest.raises(InputError, match="empty"):
        find_references("   ", registry=reg)
    with pytest.raises(InputError, match="max_results"):
        find_references("mla", registry=reg, max_results=0)


# --------------------------------------------------------------------------- gh


def _fake_gh(path, authed: bool, log):
    path.write_text(f"""#!{sys.executable}
import json, sys
args = sys.argv[1:]
open({str(log)!r}, "a").write(json.dumps(args) + "\\n")
if args[:2] == ["auth", "status"]:
    sys.exit(0 if {authed!r} else 1)
if args[:2] == ["search", "prs"]:
    print(json.dumps([
        {{"number": 55, "title": "moe_sorting: fuse topk", "url": "https://github.com/ROCm/aiter/pull/55",
          "state": "open", "isDraft": False, "updatedAt": "2026-11-20T00:00:00Z"}},
    ]))
    sys.exit(0)
sys.exit(2)
""")
    path.chmod(0o755)
    return str(path)


def test_gh_preferred_when_authenticated(reg, refs_env):
    log = refs_env / "gh.log"
    gh = _fake_gh(refs_env / "gh", True, log)

    def never(req):
        raise AssertionError("REST must not be used when gh answers")

    res = find_refs("moe_sorting", registry=reg, transport=httpx.MockTransport(never), gh_path=gh,
                          timeout_s=5, days=7)
    sec = res.sections[0]
    assert sec.method == "live:gh" and not sec.degraded
    assert sec.items[0].id == "#55" and sec.items[0].state == "open"
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    search = calls[-1]
    assert search[:2] == ["search", "prs"]
    assert search[search.index("--repo") + 1] == "ROCm/aiter"
    assert search[-2:] == ["--", "moe_sorting"]
    assert search[search.index("--updated") + 1].startswith(">=")


def test_gh_not_authenticated_falls_back_to_rest(reg, refs_env):
    gh = _fake_gh(refs_env / "gh", False, refs_env / "gh.log")

    def handler(req):
        return httpx.Response(200, json={"total_count": 1, "incomplete_results": False, "items": PR_ITEMS[:1]})

    sec = find_refs("moe_sorting", registry=reg, transport=httpx.MockTransport(handler), gh_path=gh,
                          timeout_s=5).sections[0]
    assert sec.method == "live:rest" and "gh not authenticated" in sec.reason


def test_qualifier_like_keyword_is_quoted(reg):
    seen = []

    def handler(req):
        seen.append(req.url.params["q"])
        return httpx.Response(200, json={"total_count": 0, "incomplete_results": False, "items": []})

    find_refs("repo:other/x", registry=reg, transport=httpx.MockTransport(handler), gh_path="", timeout_s=2)
    assert seen == ['"repo:other/x" repo:ROCm/aiter is:pr']


def test_gh_hang_is_killed_and_reported(reg, refs_env):
    import os

    pidfile = refs_env / "child.pid"
    gh = refs_env / "gh"
    # the stand-in starts a grandchild that would outlive it unless the whole process group is killed
    gh.write_text(f"""#!{sys.executable}
import subprocess, sys, time
if sys.argv[1:3] == ["auth", "status"]:
    sys.exit(0)
child = subprocess.Popen(["sleep", "30"])
open({str(pidfile)!r}, "w").write(str(child.pid))
time.sleep(30)
""")
    gh.chmod(0o755)
    t0 = time.monotonic()
    res = find_refs("moe_sorting", registry=reg, gh_path=str(gh), timeout_s=1.5,
                          transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    assert time.monotonic() - t0 < 2.5
    sec = res.sections[0]
    assert sec.method == "url-only" and "gh search timed out" in sec.reason
    time.sleep(0.2)
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, 0)
        alive = open(f"/proc/{pid}/stat").read().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        alive = False
    assert not alive, "the grandchild of gh survived: process group not killed"
