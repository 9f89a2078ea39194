"""The bundle's wiring: plugin manifest, server registration, skills, console script, and that
the README documents every verb and tool."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from mcp_server.faces.cli import build_parser
from mcp_server.faces.server import mcp

ROOT = Path(__file__).resolve().parent.parent


def _verbs() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "verb")
    return sorted(sub.choices)


def _tools() -> list[str]:
    async def go():
        async with Client(mcp) as c:
            return sorted(t.name for t in (await c.list_tools()).tools)

    return anyio.run(go)


BOOTSTRAP = ROOT / "bin" / "kernelscope-mcp"
PLUGIN_TOOL_PREFIX = "mcp__plugin_kernelscope_kernelscope__"  # mcp__plugin_<plugin>_<server>__<tool>


def _frontmatter(path: Path) -> str:
    return path.read_text().split("---\n", 2)[1]


def test_plugin_manifest_points_at_skills_and_server():
    plugin = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text())
    assert plugin["name"] == "kernelscope"
    skills_dir = (ROOT / ".claude-plugin").parent / plugin["skills"]
    skills = sorted(p.parent.name for p in skills_dir.glob("*/SKILL.md"))
    assert {"compare-kernels", "kernel-timeline-analysis"} <= set(skills)
    for name in skills:
        assert re.search(rf"^name: {name}$", _frontmatter(skills_dir / name / "SKILL.md"), re.M), name
    # a plugin install has no venv: the server starts through the bootstrap script (POSIX sh)
    server = plugin["mcpServers"]["kernelscope"]
    assert server == {"command": "sh", "args": ["${CLAUDE_PLUGIN_ROOT}/bin/kernelscope-mcp"]}
    market = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text())
    assert market["plugins"][0]["name"] == "kernelscope"


def test_the_marketplace_installs_links_to_the_plugins_parts_only():
    """Claude Code copies a plugin's whole source directory into its cache (following links into the
    marketplace), so the source is plugin/, links to what the plugin needs: a local clone's .venv, build
    outputs and reports stay behind (tools/check_clients.py checks the real copy)."""
    market = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text())
    assert market["plugins"][0]["source"] == "./plugin" and market["metadata"]["description"]
    tracked = subprocess.run(["git", "ls-files", "plugin"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    links = {Path(n).name: ROOT / n for n in tracked.stdout.split()}
    assert set(links) == {".claude-plugin", "bin", "skills", "mcp_server", "_shared", "pyproject.toml", "README.md"}
    for name, link in links.items():
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), name


def _mcp_json_server() -> dict:
    return json.loads((ROOT / ".mcp.json").read_text())["mcpServers"]["kernelscope"]


def test_project_mcp_json_starts_the_bootstrap_script():
    cfg = _mcp_json_server()
    # no ${...}: Claude Code expands it itself (to its own value or the default) and the MCP Inspector
    # passes it to sh literally; the script finds the checkout from the client's working directory
    assert cfg["command"] == "sh" and cfg["args"][0] == "-c" and "${" not in json.dumps(cfg)
    text = BOOTSTRAP.read_text()
    assert text.startswith("#!/bin/sh\n") and 'exec "$VPY" -m mcp_server' in text
    assert BOOTSTRAP.stat().st_mode & 0o111, "bin/kernelscope-mcp must be executable"
    assert subprocess.run(["sh", "-n", str(BOOTSTRAP)], timeout=30).returncode == 0


def test_project_mcp_json_works_from_a_subdirectory_and_refuses_outside(tmp_path):
    """Claude Code starts a project server in the directory it was started in, which may be a
    subdirectory of the checkout; the Inspector (--config .mcp.json) in its own."""
    cfg = _mcp_json_server()
    env = {**_clean_env(KERNELSCOPE_VENV=sys.prefix), "PYTHONPATH": str(ROOT)}
    for cwd in (ROOT, ROOT / "tests" / "fixtures"):
        assert _list_over_stdio([cfg["command"], *cfg["args"]], env, cwd) == _tools(), cwd
    out = subprocess.run([cfg["command"], *cfg["args"]], capture_output=True, text=True, timeout=30, env=env,
                         cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert out.returncode == 1 and out.stdout == ""
    assert f"no bin/kernelscope-mcp in {tmp_path} or above it" in out.stderr


def test_skills_allow_their_tools_under_both_names():
    """allowed-tools lists every MCP tool as a project server names it (mcp__kernelscope__X) and as
    Claude Code names a plugin's server's tool (mcp__plugin_kernelscope_kernelscope__X)."""
    tools = set(_tools())
    for path in sorted((ROOT / "skills").glob("*/SKILL.md")):
        front = _frontmatter(path)
        m = re.search(r"^allowed-tools:(.*(?:\n[ \t]+.*)*)", front, re.M)
        assert m, f"{path.parent.name}: no allowed-tools"
        words = m.group(1).replace(">-", " ").split()
        plain = {w.removeprefix("mcp__kernelscope__") for w in words if w.startswith("mcp__kernelscope__")}
        plugin = {w.removeprefix(PLUGIN_TOOL_PREFIX) for w in words if w.startswith(PLUGIN_TOOL_PREFIX)}
        assert plain, f"{path.parent.name}: allows no kernelscope tool"
        assert plain == plugin, f"{path.parent.name}: names differ between the two forms: {plain ^ plugin}"
        wild = {t for t in plain if t.endswith("*")}
        assert plain - wild <= tools, f"{path.parent.name}: allows tools the server lacks: {plain - wild - tools}"


def _list_over_stdio(argv: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(cwd))

    async def go():
        async with Client(params) as c:
            return sorted(t.name for t in (await c.list_tools()).tools)

    return anyio.run(go)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "KERNELSCOPE_VENV", "KERNELSCOPE_PYTHON")}
    env.update(extra)
    return env


def test_bootstrap_script_starts_the_server_from_the_checkout_venv(tmp_path):
    """With the checkout's .venv (made by make install, no stamp) the script execs the server at
    once, from any directory, and nothing but the protocol reaches stdout."""
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv in the checkout (run make install)")
    assert _list_over_stdio(["sh", str(BOOTSTRAP)], _clean_env(), tmp_path) == _tools()
    out = subprocess.run(["sh", str(BOOTSTRAP), "--install"], capture_output=True, text=True, timeout=60,
                         env=_clean_env(), cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == "" and "installing" not in out.stderr


def test_bootstrap_script_first_start_fails_cleanly_offline(tmp_path):
    """First start with no venv: it creates one and installs; offline the install fails with a
    one-line reason on stderr, nothing on stdout, no lock left, and the half-made venv is marked
    unfinished so the next start installs again."""
    venv = tmp_path / "venv"
    env = _clean_env(KERNELSCOPE_VENV=str(venv), KERNELSCOPE_PYTHON=sys.executable, PIP_NO_INDEX="1",
                     PIP_FIND_LINKS=str(tmp_path))
    out = subprocess.run(["sh", str(BOOTSTRAP)], capture_output=True, text=True, timeout=180, env=env,
                         cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert out.returncode == 1 and out.stdout == ""
    assert "kernelscope-mcp: installing kernelscope into" in out.stderr
    assert f"kernelscope-mcp: pip install -e {ROOT} failed" in out.stderr
    assert (venv / "bin" / "python").exists() and (venv / ".kernelscope-mcp-pending").exists()
    assert not (venv / ".kernelscope-mcp-stamp").exists()
    assert not Path(f"{venv}.kernelscope-mcp-lock").exists()


def test_one_copy_of_each_data_file():
    """The package's data folders are links to the repository's files, never copies that drift."""
    assert (ROOT / "mcp_server" / "data").is_symlink()
    assert (ROOT / "mcp_server" / "data").resolve() == (ROOT / "_shared").resolve()
    demo = list((ROOT / "mcp_server" / "demo_data").iterdir())
    sources = (ROOT / "tests" / "fixtures", ROOT / "examples")  # real data: fixtures, the worked example's ledger
    assert demo and all(p.is_symlink() and any(p.resolve().is_relative_to(s) for s in sources) for p in demo)


def test_shared_path_override_order(tmp_path, monkeypatch):
    """KERNELSCOPE_SHARED overrides per file; a file it lacks comes from the checkout's _shared/
    (the packaged default); a KERNELSCOPE_SHARED that is no directory is not silently ignored."""
    from mcp_server.core.categories import load_categories
    from mcp_server.core.paths import shared_path

    monkeypatch.delenv("KERNELSCOPE_SHARED", raising=False)
    assert shared_path("kernel_categories.csv") == ROOT / "_shared" / "kernel_categories.csv"
    (tmp_path / "kernel_categories.csv").write_text("category,pattern\ngemm,gemm|nvjet\ncommunication,nccl\n")
    monkeypatch.setenv("KERNELSCOPE_SHARED", str(tmp_path))
    assert shared_path("kernel_categories.csv") == tmp_path / "kernel_categories.csv"
    assert shared_path("functional_blocks.csv") == ROOT / "_shared" / "functional_blocks.csv"
    assert load_categories().categories[:2] == ["gemm", "communication"]
    monkeypatch.setenv("KERNELSCOPE_SHARED", str(tmp_path / "typo"))
    assert shared_path("functional_blocks.csv") == tmp_path / "typo" / "functional_blocks.csv"


def test_console_script_and_version():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["kernelscope"] == "mcp_server.faces.cli:entry"
    out = subprocess.run([sys.executable, "-m", "mcp_server.faces.cli", "--version"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("kernelscope ")


def test_every_verb_has_help_and_is_documented():
    readme = (ROOT / "README.md").read_text()
    verbs = _verbs()
    assert {"analyze", "budget", "compare", "recategorize", "refs", "serve", "timeline"} <= set(verbs)
    for verb in verbs:
        assert f"kernelscope {verb}" in readme, f"README does not show `kernelscope {verb}`"
        out = subprocess.run([sys.executable, "-m", "mcp_server.faces.cli", verb, "--help"], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0 and "usage: kernelscope" in out.stdout


def test_every_tool_is_documented():
    readme = (ROOT / "README.md").read_text()
    for tool in _tools():
        assert f"`{tool}`" in readme, f"README does not name the MCP tool `{tool}`"


def test_standalone_scripts_run_their_verb():
    """scripts/*.py are shims over the CLI: each answers --help with its verb's usage, outside the venv's PATH."""
    scripts = sorted((ROOT / "scripts").glob("*.py"))
    assert {p.stem for p in scripts} >= {"analyze_trace", "budget", "compare_kernels", "find_references",
                                         "recategorize", "timeline"}
    for p in scripts:
        out = subprocess.run([sys.executable, str(p), "--help"], capture_output=True, text=True, timeout=60,
                             cwd="/")
        assert out.returncode == 0 and "usage: kernelscope " in out.stdout, p.name
