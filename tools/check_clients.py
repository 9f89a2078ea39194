#!/usr/bin/env python3
"""Check kernelscope with the real MCP clients: the Claude Code CLI and the MCP Inspector CLI.

Needs the Claude Code CLI (``npm i -g @anthropic-ai/claude-code``) and npx (the Inspector is run as
``npx -y @modelcontextprotocol/inspector --cli``); no API key: none of these commands talks to a
model. Claude Code runs with a throwaway configuration directory (CLAUDE_CONFIG_DIR), so your own
settings, approvals and plugins are not touched. Steps, each reported PASS or FAIL:

1. project scope: ``claude mcp list`` from the repository root and from a subdirectory shows the
   ``.mcp.json`` server connected (the server approved in the throwaway settings, as a user does once);
2. ``claude plugin validate . --strict`` (the marketplace) and of ``.claude-plugin/plugin.json``;
3. the plugin from a clean clone (``git clone`` of this checkout's HEAD, with a stand-in ``.venv``
   added as a local clone has one): installed, the cached copy holds no ``.venv`` and no untracked
   file, and ``claude mcp list`` shows it connected on its first start, before its environment is
   installed; then (unless ``--no-wait``) the install finishes in the plugin's data directory, not in
   the cache, and the installed server lists and calls a tool through the Inspector;
4. the Inspector with the repository's own config (``--config .mcp.json``) lists the tools (every input
   schema an object without a top-level oneOf/anyOf/allOf, which Claude's API refuses) and calls one, from
   the root and from a subdirectory.

    .venv/bin/python tools/check_clients.py [--no-wait] [--keep]

The project server needs a venv: the checkout's ``.venv`` (``make install``), else the interpreter
running this script when it can import kernelscope (``KERNELSCOPE_VENV`` is then set to it). Exit
status 0 when every step passed, 1 otherwise, 2 when a client is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBDIR = ROOT / "tests" / "fixtures"
TRACE_A = "tests/fixtures/traces/llama_prefill_eager.json.gz"
TRACE_B = "tests/fixtures/traces/llama_prefill_sdpa.json.gz"
INSPECTOR = ["npx", "-y", "@modelcontextprotocol/inspector", "--cli"]
PLUGIN_DATA = "kernelscope-kernelscope"  # <plugin>-<marketplace> under <config>/plugins/data

results: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    results.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  ({detail})" if detail else ""), flush=True)
    return ok


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 180) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout + p.stderr, time.perf_counter() - t0
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out + f"\n(timed out after {timeout:.0f} s)", time.perf_counter() - t0


def server_line(listing: str, name: str) -> str:
    return next((ln for ln in listing.splitlines() if ln.startswith(name + ":")), "")


def project_scope(env: dict[str, str]) -> None:
    for cwd in (ROOT, SUBDIR):
        rc, out, took = run(["claude", "mcp", "list"], cwd, env)
        line = server_line(out, "kernelscope")
        check(f"claude mcp list from {cwd.relative_to(ROOT.parent)}: kernelscope connected, tools fetched",
              rc == 0 and line.endswith("✔ Connected"), f"{took:.1f} s; {line[-60:] or out[-300:]}")


def validate(env: dict[str, str]) -> None:
    for target in (".", ".claude-plugin/plugin.json"):
        rc, out, _ = run(["claude", "plugin", "validate", target, "--strict"], ROOT, env)
        check(f"claude plugin validate {target} --strict", rc == 0 and "Validation passed" in out, out.strip()[-200:])


def inspector(config: Path, cwd: Path, env: dict[str, str], label: str) -> None:
    base = [*INSPECTOR, "--config", os.path.relpath(config, cwd), "--server", "kernelscope"]
    rc, out, took = run([*base, "--method", "tools/list"], cwd, env, timeout=300)
    try:
        tools = json.loads(out[out.index("{"):])["tools"]
        names = [t["name"] for t in tools]
    except (ValueError, KeyError, TypeError):
        tools, names = [], []
    check(f"Inspector --config {label} from {cwd.relative_to(ROOT.parent) if cwd.is_relative_to(ROOT.parent) else cwd}:"
          " tools/list", rc == 0 and "analyze_trace" in names, f"{len(names)} tools, {took:.1f} s")
    refused = unusable_schemas(tools)
    check(f"Inspector --config {label}: every input schema is an object with no top-level oneOf/anyOf/allOf",
          bool(tools) and not refused, ", ".join(refused) or f"largest {max_schema(tools)}")
    a, b = (os.path.relpath(ROOT / t, cwd) for t in (TRACE_A, TRACE_B))
    rc, out, took = run([*base, "--method", "tools/call", "--tool-name", "budget", "--tool-arg", f"a={a}",
                         "--tool-arg", f"b={b}"], cwd, env, timeout=300)
    try:
        res = json.loads(out[out.index("{"):])
        ok = res.get("isError") is False and res["structuredContent"]["a"]["total_us"] > 0
    except (ValueError, KeyError, TypeError):
        ok = False
    check(f"Inspector --config {label}: tools/call budget", rc == 0 and ok, f"{took:.1f} s" if ok else out[-300:])


def unusable_schemas(tools: list[dict]) -> list[str]:
    """Tools whose input schema Claude's API refuses, so that Claude Code drops the tool or fails the request: not
    ``"type": "object"`` at the top, or a ``oneOf`` / ``anyOf`` / ``allOf`` there (a union must sit under a
    property; the ledger has one tool per kind of record instead, docs/ledger.md)."""
    bad = []
    for t in tools:
        schema = t.get("inputSchema") or {}
        if schema.get("type") != "object" or any(k in schema for k in ("oneOf", "anyOf", "allOf")):
            bad.append(t.get("name", "?"))
    return bad


def max_schema(tools: list[dict]) -> str:
    """The tool with the largest input schema, and its size in bytes (what every request carries)."""
    size, name = max((len(json.dumps(t.get("inputSchema") or {})), t.get("name", "?")) for t in tools)
    return f"{name} {size:,} bytes"


def plugin(env: dict[str, str], tmp: Path, wait: bool) -> None:
    clone = tmp / "clone"
    rc, out, _ = run(["git", "clone", "-q", str(ROOT), str(clone)], tmp, env)
    if not check("git clone of this checkout", rc == 0, out.strip()[-200:]):
        return
    (clone / ".venv" / "bin").mkdir(parents=True)  # a local clone after `make install` has one
    (clone / ".venv" / "bin" / "python").write_text("# stand-in\n")
    (clone / "eager.xlsx").write_text("an untracked report\n")
    for argv in (["claude", "plugin", "marketplace", "add", str(clone)],
                 ["claude", "plugin", "install", "kernelscope@kernelscope"]):
        rc, out, _ = run(argv, tmp, env)
        if not check(" ".join(argv[:3]), rc == 0, out.strip().splitlines()[-1] if out.strip() else ""):
            return
    config = Path(env["CLAUDE_CONFIG_DIR"])
    caches = [p for p in (config / "plugins" / "cache").glob("*/kernelscope/*") if p.is_dir()]
    strays = [str(p.relative_to(c)) for c in caches for p in c.rglob("*") if p.name in (".venv", "eager.xlsx")]
    size = sum(p.stat().st_size for c in caches for p in c.rglob("*") if p.is_file()) / 2**20
    check("the plugin's cache holds no .venv and no untracked file", bool(caches) and not strays,
          f"{size:.1f} MB in {caches[0] if caches else 'no cache'}" + (f"; found {strays}" if strays else ""))
    data = config / "plugins" / "data" / PLUGIN_DATA
    empty = tmp / "elsewhere"
    empty.mkdir()
    rc, out, took = run(["claude", "mcp", "list"], empty, env)
    line = server_line(out, "plugin:kernelscope:kernelscope")
    check("first start: claude mcp list shows the plugin's server connected before its venv is installed",
          "Connected" in line and "Failed" not in line and not (data / "venv" / ".kernelscope-mcp-stamp").exists(),
          f"{took:.1f} s; {line[-70:] or out[-300:]}")
    if not wait:
        print(f"      (the install goes on in the background: {data}/venv.install.log)")
        return
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 900 and not (data / "venv" / ".kernelscope-mcp-stamp").exists():
        time.sleep(5)
    while (data / "venv.kernelscope-mcp-lock").exists() and time.perf_counter() - t0 < 900:
        time.sleep(2)
    stamp = data / "venv" / ".kernelscope-mcp-stamp"
    in_cache = [str(p) for c in caches for p in c.rglob("pyvenv.cfg")]
    check("the first install finished in the plugin's data directory, none in its cache",
          stamp.exists() and not in_cache, f"{time.perf_counter() - t0:.0f} s more; {data / 'venv'}")
    if not stamp.exists():
        return
    rc, out, took = run(["claude", "mcp", "list"], empty, env)
    line = server_line(out, "plugin:kernelscope:kernelscope")
    check("next start: the plugin's server connected, tools fetched", line.endswith("✔ Connected"), f"{took:.1f} s")
    m = re.search(r"plugin:kernelscope:kernelscope: sh (\S+/bin/kernelscope-mcp)", out)
    if m:  # the plugin's server as Claude Code starts it, driven by the Inspector
        cfg = tmp / "plugin-server.json"
        cfg.write_text(json.dumps({"mcpServers": {"kernelscope": {
            "command": "sh", "args": [m.group(1)], "env": {"CLAUDE_PLUGIN_DATA": str(data)}}}}))
        inspector(cfg, ROOT, env, "(the installed plugin's server)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-wait", action="store_true", help="do not wait for the plugin's first install")
    ap.add_argument("--keep", action="store_true", help="keep the throwaway directories (printed)")
    a = ap.parse_args()
    missing = [tool for tool in ("claude", "npx", "git") if not shutil.which(tool)]
    if missing:
        print(f"missing: {', '.join(missing)} (npm i -g @anthropic-ai/claude-code; npx comes with Node.js)")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="kernelscope-clients-"))
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "CLAUDE_PLUGIN_ROOT",
                                                            "CLAUDE_PLUGIN_DATA", "KERNELSCOPE_VENV")}
    env["CLAUDE_CONFIG_DIR"] = str(tmp / "claude-config")
    (tmp / "claude-config").mkdir()
    # approving the project's server, as a user does once when Claude Code asks
    (tmp / "claude-config" / "settings.json").write_text(json.dumps({"enabledMcpjsonServers": ["kernelscope"]}))
    if not (ROOT / ".venv" / "bin" / "python").exists():
        probe = subprocess.run([sys.executable, "-c", "import mcp_server, mcp"], capture_output=True, timeout=120)
        if probe.returncode == 0:
            env["KERNELSCOPE_VENV"] = sys.prefix
    version = run(["claude", "--version"], ROOT, env)[1].strip()
    print(f"Claude Code {version}; throwaway config {tmp}", flush=True)
    try:
        project_scope(env)
        validate(env)
        inspector(ROOT / ".mcp.json", ROOT, env, ".mcp.json")
        inspector(ROOT / ".mcp.json", SUBDIR, env, ".mcp.json")
        plugin({k: v for k, v in env.items() if k not in ("KERNELSCOPE_VENV", "PYTHONPATH")}, tmp, wait=not a.no_wait)
    finally:
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    failed = [name for name, ok, _ in results if not ok]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
