"""Local checkout search on real temporary git repositories."""
from __future__ import annotations

import pytest
from test_refs_support import git, make_repo, refs_env, write_registry  # noqa: F401  (fixture)

from mcp_server.refs import find_references


@pytest.fixture
def reg(refs_env):
    return write_registry(refs_env / "reg.md", ["| aiter-local | local-git | ROCm/aiter | AITER_ROOT | | | yes |"])


def test_commits_and_files_from_env_root(refs_env, reg, monkeypatch):
    repo = refs_env / "checkouts" / "aiter"
    commits = make_repo(repo)
    monkeypatch.setenv("AITER_ROOT", str(repo / "csrc"))  # a subdirectory resolves to the top level
    res = find_references("moe_sorting", registry=reg, timeout_s=10)
    sec = res.sections[0]
    assert sec.method == "local:git" and not sec.degraded and sec.root == str(repo)
    by_match = {i.match: i for i in sec.items if i.kind == "commit"}
    # --grep is case-insensitive: "MoE_Sorting" in the message matches
    assert by_match["message"].commit == commits["msg"]
    assert by_match["message"].subject == "Add MoE_Sorting kernel for gfx942"
    # -S finds the commit whose message does not mention the keyword but whose diff adds it
    assert by_match["diff"].commit == commits["diff"] and by_match["diff"].subject == "Wire the new path into dispatch"
    # each commit listed once although the first also matches -S
    assert len([i for i in sec.items if i.kind == "commit"]) == 2
    files = {(i.file, i.line) for i in sec.items if i.kind == "file"}
    assert files == {("csrc/sort.cu", 2), ("dispatch.py", 4)}
    snippet = next(i.snippet for i in sec.items if i.file == "csrc/sort.cu")
    assert snippet == "__global__ void moe_sorting_kernel() {}"
    assert res.outcomes == ["local_hit"]
    assert "from AITER_ROOT" in sec.reason and "HEAD" in sec.reason


def test_days_limits_commits(refs_env, reg, monkeypatch):
    repo = refs_env / "aiter"
    commits = make_repo(repo)  # the message commit is dated 2020, the diff commit today
    monkeypatch.setenv("AITER_ROOT", str(repo))
    sec = find_references("moe_sorting", registry=reg, days=30, timeout_s=10).sections[0]
    assert [i.commit for i in sec.items if i.kind == "commit"] == [commits["diff"]]


def test_max_results_caps_file_hits(refs_env, reg, monkeypatch):
    repo = refs_env / "aiter"
    make_repo(repo)
    (repo / "many.txt").write_text("moe_sorting\n" * 7)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "more")
    monkeypatch.setenv("AITER_ROOT", str(repo))
    sec = find_references("moe_sorting", registry=reg, max_results=3, timeout_s=10).sections[0]
    assert len([i for i in sec.items if i.kind == "file"]) == 3
    assert "9 matching lines, first 3 shown" in sec.reason


def test_detected_in_home(refs_env, reg):
    make_repo(refs_env / "home" / "aiter")  # ~/aiter, HOME is the temporary home
    sec = find_references("moe_sorting", registry=reg, timeout_s=10).sections[0]
    assert sec.method == "local:git" and sec.root == str(refs_env / "home" / "aiter")
    assert "found at" in sec.reason


def test_env_not_a_checkout(refs_env, reg, monkeypatch):
    plain = refs_env / "plain"
    plain.mkdir()
    monkeypatch.setenv("AITER_ROOT", str(plain))
    sec = find_references("moe_sorting", registry=reg, timeout_s=5).sections[0]
    assert sec.method == "url-only" and "does not name a git checkout" in sec.reason
    assert sec.url == "https://github.com/search?type=code&q=repo%3AROCm%2Faiter+moe_sorting"


def test_no_hits_is_nothing_found(refs_env, reg, monkeypatch):
    repo = refs_env / "aiter"
    make_repo(repo)
    monkeypatch.setenv("AITER_ROOT", str(repo))
    res = find_references("paged_attention_v9", registry=reg, timeout_s=10)
    assert res.sections[0].items == [] and res.sections[0].method == "local:git"
    assert res.outcomes == ["nothing_found"] and res.unanswered == []


def test_keyword_is_literal_not_regex_or_option(refs_env, reg, monkeypatch):
    repo = refs_env / "aiter"
    make_repo(repo)
    monkeypatch.setenv("AITER_ROOT", str(repo))
    for kw in ("moe.sorting", "--all", "-v"):
        sec = find_references(kw, registry=reg, timeout_s=10).sections[0]
        assert sec.method == "local:git" and sec.items == [], kw


def test_importable_package_clone_is_detected_but_installed_copy_is_not(refs_env, monkeypatch):
    import importlib

    reg = write_registry(refs_env / "reg2.md", ["| x-local | local-git | ROCm/kstestpkg | KSTEST_ROOT | kstestpkg | | "
                                                "yes |"])
    # an installed copy inside some other repository's site-packages: must not be taken for the clone
    other = refs_env / "venvrepo"
    other.mkdir()
    git(other, "init", "-q")
    site = other / "lib" / "site-packages"
    (site / "kstestpkg").mkdir(parents=True)
    (site / "kstestpkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    sec = find_references("moe_sorting", registry=reg, timeout_s=5).sections[0]
    assert sec.method == "url-only" and "no checkout" in sec.reason
    # an editable install from a clone: the package's git root is the checkout
    clone = refs_env / "clone"
    make_repo(clone)
    (clone / "kstestpkg").mkdir()
    (clone / "kstestpkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(clone))
    importlib.invalidate_caches()
    sec = find_references("moe_sorting", registry=reg, timeout_s=5).sections[0]
    assert sec.method == "local:git" and sec.root == str(clone)
    assert "importable package kstestpkg" in sec.reason


def test_slow_pickaxe_keeps_other_hits_and_says_incomplete(refs_env, reg, monkeypatch):
    from mcp_server.core import proc
    repo = refs_env / "aiter"
    commits = make_repo(repo)
    monkeypatch.setenv("AITER_ROOT", str(repo))
    real_run = proc.run

    def run(args, **kw):
        if any(a.startswith("-S") for a in args):
            # what proc.run returns when the group was killed on its timeout
            return proc.ProcResult(rc=None, stdout="", stderr="", timed_out=True)
        return real_run(args, **kw)

    monkeypatch.setattr(proc, "run", run)
    res = find_references("moe_sorting", registry=reg, timeout_s=10)
    sec = res.sections[0]
    assert sec.method == "local:git" and sec.incomplete and sec.degraded
    assert "git log -S timed out" in sec.reason
    assert [i.commit for i in sec.items if i.kind == "commit"] == [commits["msg"]]
    assert len([i for i in sec.items if i.kind == "file"]) == 2
    assert res.outcomes == ["local_hit"] and res.unanswered == ["aiter-local"]
