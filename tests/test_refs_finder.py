"""find_references as a whole: offline degradation, registry, redaction, CLI and MCP faces."""
from __future__ import annotations

import json
import logging
import time

import anyio
import httpx
import pytest
from test_refs_support import FakeJira, closed_port, find_refs, make_repo, refs_env, write_registry  # noqa: F401

from mcp_server.core.errors import InputError
from mcp_server.faces.cli import main as cli_main
from mcp_server.refs import ReferenceResult
from mcp_server.refs.registry import default_registry_path, load_registry, parse_registry


def test_shipped_registry_parses():
    reg = load_registry()
    keys = {s.key: s for s in reg.sources}
    assert set(keys) == {"aiter-upstream", "sglang-upstream", "aiter-local", "sglang-local", "jira"}
    assert keys["aiter-upstream"].repo == "ROCm/aiter" and keys["sglang-upstream"].repo == "sgl-project/sglang"
    assert keys["aiter-local"].env == "AITER_ROOT" and keys["sglang-local"].package == "sglang"
    assert keys["jira"].env == "JIRA_SERVER" and all(s.enabled for s in reg.sources)
    assert reg.path == str(default_registry_path())


@pytest.mark.parametrize("row, msg", [
    ("| a | svn | x/y | | | | yes |", "unknown kind"),
    ("| a | github-prs | | | | | yes |", "needs a repo"),
    ("| a | github-prs | notarepo | | | | yes |", "not owner/name"),
    ("| a | local-git | x/y | $ROOT | | | yes |", "not an environment variable"),
    ("| a | jira | | | | | maybe |", "enabled column must be yes or no"),
    ("| a | local-git | x/y | AWS_SECRET_ACCESS_KEY | | | yes |", "names a credential variable"),
    ("| a | jira | | JIRA_EMAIL | | | yes |", "names a credential variable"),
    ("| a,b | jira | | | | | yes |", "the key column is not a source key"),
])
def test_registry_errors_name_file_and_line(tmp_path, row, msg):
    path = tmp_path / "r.md"
    write_registry(path, [row])
    with pytest.raises(InputError, match=msg) as ei:
        load_registry(path)
    assert f"{path}:5" in str(ei.value)
    for cell in ("svn", "notarepo", "$ROOT", "maybe", "a,b"):  # a cell of the file is never echoed
        assert cell not in str(ei.value)


def test_registry_select_and_disabled(tmp_path):
    reg = parse_registry(
        "| key | kind | repo | enabled |\n|---|---|---|---|\n| a | github-prs | o/a | yes |\n| b | github-prs | o/b | no |\n",
        "r.md")
    assert [s.key for s in reg.select(None)] == ["a"]
    assert [s.key for s in reg.select(["b"])] == ["b"]  # named explicitly: used although disabled
    assert [s.key for s in reg.select(["a,b"])] == ["a", "b"]
    assert [s.key for s in reg.select([" b ,", ","])] == ["b"]  # blanks and empty parts are no key
    with pytest.raises(InputError, match="unknown source"):
        reg.select(["c"])
    with pytest.raises(InputError, match="no sources table"):
        parse_registry("# nothing here\n", "x.md")
    with pytest.raises(InputError, match=r"line 1: .*unknown columns \(column 4\)") as ei:
        parse_registry("| key | kind | repo | secret_col |\n|---|---|---|---|\n| a | github-prs | o/a | x |\n", "r.md")
    assert "secret_col" not in str(ei.value)
    no_enabled = parse_registry("| key | kind | repo |\n|---|---|---|\n| a | github-prs | o/a |\n", "r.md")
    assert [s.enabled for s in no_enabled.sources] == [True]  # without the column every row is enabled


def test_offline_no_tokens_no_checkouts_returns_url_only_within_bound(refs_env, monkeypatch):
    # shipped registry, GitHub API on a closed 127.0.0.1 port, Jira site on another closed port
    jira_site = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("JIRA_SERVER", jira_site)
    t0 = time.monotonic()
    res = find_refs("fused_moe", timeout_s=3.0, gh_path="")
    assert time.monotonic() - t0 < 3.5
    by = {s.source: s for s in res.sections}
    assert set(by) == {"aiter-upstream", "sglang-upstream", "aiter-local", "sglang-local", "jira"}
    for s in res.sections:
        assert s.method == "url-only" and s.degraded and s.reason and s.url and s.items == []
    assert "offline" in by["aiter-upstream"].reason and "gh disabled" in by["aiter-upstream"].reason
    assert by["sglang-upstream"].url == "https://github.com/sgl-project/sglang/pulls?q=is%3Apr+fused_moe"
    assert "no checkout" in by["aiter-local"].reason and "$AITER_ROOT" in by["aiter-local"].reason
    assert "no credentials" in by["jira"].reason
    assert by["jira"].url == jira_site + "/issues/?jql=text%20~%20%22fused_moe%22%20ORDER%20BY%20updated%20DESC"
    assert res.outcomes == ["unknown"]  # nothing found, but nothing answered: not "new work"
    assert res.unanswered == [s.source for s in res.sections]
    assert res.category == "moe" and res.category_source == "classified"


def test_category_ranks_matching_hits_first(refs_env):
    reg = write_registry(refs_env / "reg.md", ["| aiter-upstream | github-prs | ROCm/aiter | | | | yes |"])
    items = [
        {"number": 1, "title": "mla decode tweak", "html_url": "u1", "state": "open", "updated_at": "t", "pull_request": {}},
        {"number": 2, "title": "mla: attention sink support", "html_url": "u2", "state": "open", "updated_at": "t", "pull_request": {}},
    ]
    t = httpx.MockTransport(lambda r: httpx.Response(200, json={"total_count": 2, "incomplete_results": False, "items": items}))
    res = find_refs("mla", registry=reg, transport=t, gh_path="", timeout_s=2)
    assert res.category == "attention"
    assert [i.id for i in res.sections[0].items] == ["#2", "#1"]
    res = find_refs("mla", category="decode", registry=reg, transport=t, gh_path="", timeout_s=2, no_cache=True)
    assert res.category_source == "given" and [i.id for i in res.sections[0].items] == ["#1", "#2"]


def test_tokens_never_in_outputs_logs_or_cache(refs_env, monkeypatch, capsys, caplog):
    gh_tok = "ghp_SECRETsecretSECRET0123456789ab"
    jira_tok = "ATATTsecretCLOUDtoken987654321"
    pat = "PATsecretDCtoken-5555-abcdef"
    monkeypatch.setenv("GITHUB_TOKEN", gh_tok)
    monkeypatch.setenv("JIRA_EMAIL", "dev@example.invalid")
    monkeypatch.setenv("JIRA_API_TOKEN", jira_tok)
    caplog.set_level(logging.DEBUG)
    reg_path = refs_env / "reg.md"
    outputs = []
    with FakeJira("Cloud") as ok, FakeJira("Server", status=401) as bad:
        for server in (ok.url, bad.url):
            monkeypatch.setenv("JIRA_SERVER", server)
            write_registry(reg_path, ["| aiter-upstream | github-prs | ROCm/aiter | | | | yes |",
                                      "| jira | jira | | JIRA_SERVER | | | yes |"])
            rc = cli_main(["refs", "moe_sorting", "--registry", str(reg_path), "--json", "--timeout", "3"])
            outputs.append(capsys.readouterr())
            assert rc == 0
            rc = cli_main(["refs", "moe_sorting", "--registry", str(reg_path), "--timeout", "3", "--no-cache"])
            outputs.append(capsys.readouterr())
        monkeypatch.delenv("JIRA_API_TOKEN")
        monkeypatch.setenv("JIRA_PAT", pat)
        monkeypatch.setenv("JIRA_SERVER", bad.url)
        cli_main(["refs", "moe_sorting", "--registry", str(reg_path), "--json", "--timeout", "3"])
        outputs.append(capsys.readouterr())
    first = json.loads(outputs[0].out)
    assert {s["source"]: s["method"] for s in first["sections"]}["jira"] == "live:jira"
    # GitHub answered 401 (closed port => offline) : either way nothing secret may show
    blobs = [o.out + o.err for o in outputs] + [r.getMessage() for r in caplog.records]
    cache_files = list((refs_env / "cache").rglob("*"))
    assert any(f.is_file() and f.name.startswith("jira-") for f in cache_files)
    blobs += [f.read_text() for f in cache_files if f.is_file()]
    for blob in blobs:
        for secret in (gh_tok, jira_tok, pat, "SECRET", "secret"):
            assert secret not in blob


def test_cli_json_is_the_model(refs_env, monkeypatch, capsys):
    repo = refs_env / "aiter"
    make_repo(repo)
    monkeypatch.setenv("AITER_ROOT", str(repo))
    rc = cli_main(["refs", "moe_sorting", "--sources", "aiter-local", "--max", "5", "--json"])
    assert rc == 0
    res = ReferenceResult.model_validate(json.loads(capsys.readouterr().out))
    assert res.sections[0].source == "aiter-local" and res.outcomes == ["local_hit"]
    rc = cli_main(["refs", "moe_sorting", "--sources", "nope"])
    assert rc == 2 and "unknown source(s) nope" in capsys.readouterr().err
    rc = cli_main(["refs", "moe_sorting", "--sources", "aiter-local"])
    text = capsys.readouterr().out
    assert rc == 0 and "local:git" in text and "dispatch / wiring" in text and "Add MoE_Sorting kernel" in text


def test_mcp_tool_schema_and_call(refs_env, monkeypatch):
    from mcp import Client

    from mcp_server.faces.server import mcp

    repo = refs_env / "aiter"
    commits = make_repo(repo)
    monkeypatch.setenv("AITER_ROOT", str(repo))

    async def go():
        async with Client(mcp) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            tool = tools["find_references"]
            assert tool.annotations.read_only_hint and tool.annotations.open_world_hint
            assert set(tool.output_schema["properties"]) >= {"keyword", "sections", "outcomes", "elapsed_s"}
            from mcp_server.refs.requests import FindReferencesRequest

            assert tool.input_schema == FindReferencesRequest.model_json_schema()
            assert {"keyword", "category", "sources", "max_results", "days", "timeout_s"} <= set(
                tool.input_schema["properties"])
            ok = await c.call_tool("find_references", {"keyword": "moe_sorting", "sources": ["aiter-local"]})
            bad = await c.call_tool("find_references", {"keyword": "", "sources": ["aiter-local"]})
            return ok, bad

    ok, bad = anyio.run(go)
    assert not ok.is_error
    sec = ok.structured_content["sections"][0]
    assert sec["method"] == "local:git"
    assert commits["msg"] in [i["commit"] for i in sec["items"]]
    assert bad.is_error and "keyword: String should have at least 1 character" in bad.content[0].text
