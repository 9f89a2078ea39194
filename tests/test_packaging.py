"""The bundle's wiring: plugin manifest, server registration, skills, console script, and that
the README documents every verb and tool."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_server.cli import build_parser
from mcp_server.server import mcp

ROOT = Path(__file__).resolve().parent.parent


def _verbs() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "verb")
    return sorted(sub.choices)


def _tools() -> list[str]:
    async def go():
        async with Client(mcp) as c:
            return sorted(t.name for t in (await c.list_tools()).tools)

    return anyio.run(go)


def test_plugin_manifest_points_at_skills_and_server():
    plugin = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text())
    assert plugin["name"] == "kernelscope"
    skills_dir = (ROOT / ".claude-plugin").parent / plugin["skills"]
    skills = sorted(p.parent.name for p in skills_dir.glob("*/SKILL.md"))
    assert skills == ["compare-kernels", "kernel-timeline-analysis"]
    for name in skills:
        front = (skills_dir / name / "SKILL.md").read_text().split("---\n", 2)[1]
        assert re.search(rf"^name: {name}$", front, re.M), name
    server = plugin["mcpServers"]["kernelscope"]
    assert "-m mcp_server" in " ".join(server["args"])
    market = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text())
    assert market["plugins"][0]["name"] == "kernelscope"


def test_project_mcp_json_starts_the_stdio_server():
    cfg = json.loads((ROOT / ".mcp.json").read_text())["mcpServers"]["kernelscope"]
    assert cfg["args"] == ["-m", "mcp_server"]


def test_console_script_and_version():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["kernelscope"] == "mcp_server.cli:entry"
    out = subprocess.run([sys.executable, "-m", "mcp_server.cli", "--version"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("kernelscope ")


def test_every_verb_has_help_and_is_documented():
    readme = (ROOT / "README.md").read_text()
    verbs = _verbs()
    assert {"analyze", "budget", "compare", "recategorize", "refs", "serve", "timeline"} <= set(verbs)
    for verb in verbs:
        assert f"kernelscope {verb}" in readme, f"README does not show `kernelscope {verb}`"
        out = subprocess.run([sys.executable, "-m", "mcp_server.cli", verb, "--help"], capture_output=True,
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
