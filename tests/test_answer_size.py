"""What a client receives for a tool's answer: the structured content once, and a text block that keeps
the whole message within sizing.ANSWER_BUDGET (bench/bench_answer_size.py measures every tool)."""
from __future__ import annotations

import json

import anyio
import pytest
from conftest import FIXTURES, TRACES

from mcp_server.faces.server import build_server
from mcp_server.faces.sizing import ANSWER_BUDGET, TEXT_VIEW

TIMELINE = FIXTURES / "timeline"
EAGER = str(TRACES / "llama_prefill_eager.json.gz")
SDPA = str(TRACES / "llama_prefill_sdpa.json.gz")


@pytest.fixture(autouse=True)
def _inline(monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_ISOLATION", "0")


def _call(tool, args):
    from mcp import Client

    async def go():
        async with Client(build_server()) as c:
            return await c.call_tool(tool, args)

    res = anyio.run(go)
    assert not res.is_error, res.content[0].text
    # the JSON-RPC response as the stdio transport writes it: {"jsonrpc":"2.0","id":N,"result":{...}}
    wire = len(res.model_dump_json(by_alias=True, exclude_none=True).encode()) + len('{"jsonrpc":"2.0","id":1,"result":}')
    return res, wire


def test_a_small_answer_carries_its_json_once_more_as_compact_text():
    res, wire = _call("budget", {"a": EAGER, "b": SDPA})
    assert len(res.content) == 1 and json.loads(res.content[0].text) == res.structured_content
    assert "\n" not in res.content[0].text  # compact: the SDK alone would indent it
    assert wire <= ANSWER_BUDGET


def test_a_larger_answer_sends_a_narrower_text_view_within_the_budget():
    res, wire = _call("analyze_timeline", {"buffer_path": str(TIMELINE / "imbalanced_probe.bin"),
                                           "event_names": str(TIMELINE / "phases.events")})
    view = json.loads(res.content[0].text)
    assert view != res.structured_content and set(view) == set(res.structured_content)
    notes = [w["message"] for w in view["warnings"] if w["code"] == "summary_truncated"]
    assert any(m.startswith(TEXT_VIEW) for m in notes), notes
    assert wire <= ANSWER_BUDGET < wire + len(json.dumps(res.structured_content))  # a full copy would not fit


def test_an_answer_too_large_for_any_text_view_points_at_the_structured_content():
    res, wire = _call("diff_modules", {"a": EAGER, "b": SDPA})
    assert res.content[0].text.startswith("The answer is in this result's structured content")
    assert res.structured_content["a"]["total_us"] > 0 and wire <= ANSWER_BUDGET


def test_detail_sends_everything_as_asked():
    res, _ = _call("diff_modules", {"a": EAGER, "b": SDPA, "detail": True})
    assert json.loads(res.content[0].text) == res.structured_content
