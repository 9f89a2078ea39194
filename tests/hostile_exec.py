"""Drive kernelscope as a hostile caller would, on both faces: the console script in a child process, and the
real MCP server over stdio (official client, KERNELSCOPE_ROOTS set), which must still answer afterwards."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_hostile_inputs as recipes  # noqa: E402  (the reproducers; re-exported for the tests)

__all__ = ["cli", "mcp", "recipes", "text"]

CLI_MAIN = "import sys\nfrom mcp_server.faces.cli import main\nsys.exit(main(sys.argv[1:], limits=True))\n"


def cli(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``kernelscope ARGS`` run in ``cwd``."""
    e = dict(os.environ, COLUMNS="200", PYTHONPATH=str(ROOT), **(env or {}))
    p = subprocess.run([sys.executable, "-c", CLI_MAIN, *args], cwd=cwd, env=e, capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def mcp(calls: list[tuple[str, dict[str, Any]]], roots: Path, cwd: Path | None = None,
        env: dict[str, str] | None = None, timeout: float = 300) -> list[Any]:
    """Call each (tool, arguments) in one stdio server confined to ``roots``; then check it still answers
    (lists its tools and runs list_experiments on a missing ledger: a typed error, not a dead server)."""
    import anyio
    from mcp import Client, StdioServerParameters

    e = dict(os.environ, PYTHONPATH=str(ROOT), KERNELSCOPE_ROOTS=str(roots), **(env or {}))
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server"], env=e,
                                   cwd=str(cwd or roots))

    async def go():
        out = []
        async with Client(params, read_timeout_seconds=timeout) as c:
            for tool, args in calls:
                out.append(await c.call_tool(tool, args))
            tools = (await c.list_tools()).tools
            alive = await c.call_tool("list_experiments", {"ledger": str(roots / "no-such-ledger.db")})
        assert len(tools) > 10, "the server stopped listing its tools"
        assert alive.is_error and "no ledger here" in alive.content[0].text, "the server no longer answers"
        return out

    return anyio.run(go)


def text(res: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in res.content)
