"""The analyze_trace MCP tool, in-process through the official client."""
from __future__ import annotations

import anyio
from conftest import TRACES
from mcp import Client

from mcp_server.faces.server import mcp


def _run(coro_fn):
    return anyio.run(coro_fn)


def test_tool_listed_with_schemas():
    async def go():
        async with Client(mcp) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            return tools["analyze_trace"]

    tool = _run(go)
    props = tool.input_schema["properties"]
    assert {"trace_path", "output_xlsx", "categories", "reference_trace"} <= set(props)
    assert tool.input_schema.get("required") == ["trace_path"]
    out = tool.output_schema["properties"]
    assert {"total_kernel_us", "kernel_count", "unattributed_count", "modules", "categories", "graph"} <= set(out)
    assert tool.annotations is not None


def test_tool_answers_and_survives_bad_input(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")

    async def go():
        async with Client(mcp) as c:
            ok = await c.call_tool("analyze_trace", {
                "trace_path": str(TRACES / "llama_decode_graph.json.gz"),
                "reference_trace": str(TRACES / "llama_decode_mixed.json.gz"),
            })
            err1 = await c.call_tool("analyze_trace", {"trace_path": str(bad)})
            err2 = await c.call_tool("analyze_trace", {"trace_path": str(tmp_path / "missing.json")})
            again = await c.call_tool("analyze_trace", {"trace_path": str(TRACES / "llama_prefill_eager.json.gz")})
            return ok, err1, err2, again

    ok, err1, err2, again = _run(go)
    assert not ok.is_error
    sc = ok.structured_content
    assert sc["kernel_count"] == 399 and sc["graph"]["method"] == "reference-trace"
    assert any(m["type"] == "LlamaDecoderLayer" for m in sc["modules"])
    for err, word in ((err1, "not valid JSON"), (err2, "not found")):
        assert err.is_error
        text = err.content[0].text
        assert word in text and "Traceback" not in text
    assert str(bad) in err1.content[0].text
    assert not again.is_error and again.structured_content["unattributed_count"] == 0
