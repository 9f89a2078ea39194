"""Driving both faces with a hostile input: the CLI in this process and the real MCP server over stdio.

``cli(args)`` -> (exit code, stdout, stderr); ``mcp_session(calls, env)`` runs ``(tool, arguments)`` calls in
one server process and, after each, a small real call that must succeed (the server is alive), returning each
hostile call's (is_error, text, structured content)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio

# imported at the top: the stdio server's stderr default is bound at import, and under capsys sys.stderr has no
# file descriptor
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_hostile_inputs as recipes  # noqa: E402,F401  (the reproducers' recipes, for the tests)

HOSTILE = ROOT / "tests" / "fixtures" / "hostile"
#: a small, real call the server must still answer after each hostile one
ALIVE_CALL = ("analyze_trace", {"trace_path": str(ROOT / "tests" / "fixtures" / "traces" / "llama_prefill_sdpa.json.gz"),
                                "top_n": 1})


def cli(args: list[str], capsys: Any) -> tuple[int, str, str]:
    from mcp_server.faces.cli import main

    capsys.readouterr()
    code = main(args)
    got = capsys.readouterr()
    return code, got.out, got.err


def cli_error(args: list[str], capsys: Any) -> str:
    """The one error line of a CLI run that must fail (exit 2, no traceback), without its ``error: `` prefix."""
    code, out, err = cli(args, capsys)
    assert code == 2, (code, out, err)
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0][len("error: "):]


def mcp_session(calls: list[tuple[str, dict[str, Any]]], env: dict[str, str] | None = None,
                timeout: float = 240, alive: bool = True) -> list[tuple[bool, str, Any]]:
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server"], env=full_env, cwd=str(ROOT))
    out: list[tuple[bool, str, Any]] = []

    async def go() -> None:
        with anyio.fail_after(timeout):
            async with Client(params, read_timeout_seconds=120) as c:
                for tool, arguments in calls:
                    r = await c.call_tool(tool, arguments)
                    text = "".join(getattr(x, "text", "") for x in r.content)
                    if r.is_error:  # the SDK's frame around a tool error; the rest is the CLI's line
                        text = text.removeprefix(f"Error executing tool {tool}: ")
                    out.append((bool(r.is_error), text, r.structured_content))
                    if alive:  # (False: an environment that fails every call; the server answered this one)
                        again = await c.call_tool(*ALIVE_CALL)
                        assert not again.is_error, f"server not serving after {tool}: {again.content}"

    anyio.run(go)
    return out


def blob(*parts: Any) -> str:
    """Everything a face returned, as one text to search for secrets."""
    return " ".join(p if isinstance(p, str) else json.dumps(p, default=str) for p in parts)
