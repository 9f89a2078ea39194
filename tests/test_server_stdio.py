"""The real server process over stdio, as Claude Code starts it (`python -m mcp_server`)."""
from __future__ import annotations

import sys

import anyio
from conftest import TRACES
from mcp import Client, StdioServerParameters

EXPECTED_TOOLS = {
    "analyze_trace", "recategorize", "budget", "diff_modules", "find_references",
    "analyze_timeline", "compare_timelines",
}


def test_stdio_server_lists_every_tool_and_keeps_serving_after_errors(tmp_path):
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server"])
    eager = str(TRACES / "llama_prefill_eager.json.gz")
    sdpa = str(TRACES / "llama_prefill_sdpa.json.gz")

    async def go():
        async with Client(params, read_timeout_seconds=120) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            bad = await c.call_tool("analyze_trace", {"trace_path": str(tmp_path / "missing.json")})
            budget = await c.call_tool("budget", {"a": eager, "b": sdpa, "labels": ["eager", "sdpa"]})
            return tools, bad, budget

    tools, bad, budget = anyio.run(go)
    assert EXPECTED_TOOLS <= set(tools)
    for name in EXPECTED_TOOLS:
        assert tools[name].output_schema, f"{name} has no output schema"
        assert tools[name].description
    assert bad.is_error
    assert "missing.json" in bad.content[0].text
    assert not budget.is_error
    rows = budget.structured_content["rows"]
    assert abs(sum(r["a_pct"] for r in rows) - 100.0) < 1e-3  # the summary rounds to 6 significant digits
    assert abs(sum(r["b_pct"] for r in rows) - 100.0) < 1e-3  # the summary rounds to 6 significant digits
