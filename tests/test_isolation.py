"""The MCP server survives inputs and engines that crash, hog memory or hang (mcp_server/faces/workers.py)."""
from __future__ import annotations

import anyio
import pytest
from conftest import FIXTURES, TRACES
from isolation_ops import MISBEHAVE
from mcp import Client

from mcp_server.faces.registry import operations
from mcp_server.faces.server import build_server

HOSTILE = FIXTURES / "hostile"


@pytest.fixture()
def server(monkeypatch):
    import mcp_server.faces.server as srv

    monkeypatch.setenv("KERNELSCOPE_ISOLATION", "1")
    monkeypatch.setenv("KERNELSCOPE_WORKER_MEMORY", "1G")
    # the reader's own guard refuses the reproducer before calamine sees it; lift it, so the
    # native abort happens and the isolation (the second line of defence) is what is tested
    monkeypatch.setenv("KERNELSCOPE_MAX_XLSX_CELLS", str(10**15))
    monkeypatch.setattr(srv, "_POOL", None)  # fresh workers that inherit this environment
    yield build_server([*operations(), MISBEHAVE])
    if srv._POOL is not None:
        srv._POOL.close()


def test_native_abort_in_a_reader_is_a_tool_error_and_the_server_keeps_serving(server):
    """tests/fixtures/hostile/xlsx_max_cell.xlsx makes the calamine reader abort the process (SIGABRT)."""
    bomb = str(HOSTILE / "xlsx_max_cell.xlsx")
    good = {"a": str(TRACES / "llama_prefill_eager.json.gz"), "b": str(TRACES / "llama_prefill_sdpa.json.gz")}
    results = {}

    async def go():
        async with Client(server) as c:
            async def call(key, args):
                results[key] = await c.call_tool("budget", args)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "bad", {"a": bomb, "b": bomb})
                tg.start_soon(call, "good", good)
            results["after"] = await c.call_tool("budget", good)
            results["tools"] = len((await c.list_tools()).tools)

    anyio.run(go)
    bad = results["bad"]
    assert bad.is_error
    text = bad.content[0].text
    assert "budget: the worker was killed by SIGABRT" in text and "keeps serving" in text
    for key in ("good", "after"):
        assert not results[key].is_error
        rows = results[key].structured_content["rows"]
        assert {r["category"] for r in rows} >= {"gemm", "attention"}
    assert results["tools"] == len(operations()) + 1


def test_memory_hog_is_stopped_by_the_worker_limit(server):
    async def go():
        async with Client(server) as c:
            hog = await c.call_tool("misbehave", {"how": "hog"})
            ok = await c.call_tool("misbehave", {"how": "ok"})
            return hog, ok

    hog, ok = anyio.run(go)
    assert hog.is_error and "out of memory under the worker's limit (1024 MiB" in hog.content[0].text
    assert not ok.is_error


def test_overrun_is_stopped_and_the_worker_replaced(server, monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_CALL_TIMEOUT", "2")

    async def go():
        with anyio.fail_after(30):
            return await _calls()

    async def _calls():
        async with Client(server) as c:
            slow = await c.call_tool("misbehave", {"how": "sleep", "seconds": 60})
            first = await c.call_tool("misbehave", {"how": "ok"})
            second = await c.call_tool("misbehave", {"how": "ok"})
            return slow, first, second

    slow, first, second = anyio.run(go)
    assert slow.is_error and "over its time limit of 2 s" in slow.content[0].text
    assert not first.is_error and first.structured_content["pid"] == second.structured_content["pid"]  # warm worker


def test_engine_stdout_never_reaches_the_protocol(server):
    async def go():
        async with Client(server) as c:
            return await c.call_tool("misbehave", {"how": "print"})

    res = anyio.run(go)
    assert not res.is_error and res.structured_content["how"] == "print"


def test_abort_in_an_engine_names_the_signal(server):
    async def go():
        async with Client(server) as c:
            dead = await c.call_tool("misbehave", {"how": "abort"})
            alive = await c.call_tool("misbehave", {"how": "ok"})
            return dead, alive

    dead, alive = anyio.run(go)
    assert dead.is_error and "SIGABRT" in dead.content[0].text
    assert not alive.is_error


def test_every_reproducer_at_once_beside_good_calls(server, monkeypatch):
    """Each committed reproducer (tests/fixtures/hostile) through the tool that reads it, all concurrently with
    good calls: every good call answers correctly, every bad one is a one-line tool error, the server lives on."""
    monkeypatch.setenv("KERNELSCOPE_MAX_XLSX_CELLS", "50000000")  # the default guard, not the lifted one
    good_trace = str(TRACES / "llama_prefill_sdpa.json.gz")
    bad = {}
    for p in sorted(HOSTILE.iterdir()):
        if p.name.startswith("xlsx_"):
            bad[p.name] = ("budget", {"a": str(p), "b": str(p)})
        elif p.name.startswith("trace_"):
            bad[p.name] = ("analyze_trace", {"trace_path": str(p)})
        elif p.name.startswith("categories_"):
            bad[p.name] = ("analyze_trace", {"trace_path": good_trace, "categories": str(p)})
    assert len(bad) >= 15
    answers: dict = {}

    async def go():
        async with Client(server) as c:
            async def call(key, tool, args):
                answers[key] = await c.call_tool(tool, args)

            async with anyio.create_task_group() as tg:
                for name, (tool, args) in bad.items():
                    tg.start_soon(call, name, tool, args)
                for i in range(4):
                    tg.start_soon(call, f"good{i}", "analyze_trace", {"trace_path": good_trace})
            answers["alive"] = len((await c.list_tools()).tools)

    anyio.run(go)
    for i in range(4):
        good = answers[f"good{i}"]
        assert not good.is_error and good.structured_content["kernel_count"] == 110
    readable = {"xlsx_sheet_paren.xlsx", "xlsx_sheetdata_junk.xlsx", "trace_nonfinite.json",  # real data inside
                # a trace set's head (tests/test_hostile_bounds.py): one trace of it reads; a device name warns
                "trace_world_size.json", "trace_rank_huge.json", "trace_device_name.json"}
    for name in bad:
        res = answers[name]
        if name in readable:
            continue
        assert res.is_error, name
        text = res.content[0].text
        assert "\n" not in text and "Traceback" not in text and "internal error" not in text, (name, text)
    assert answers["alive"] == len(operations()) + 1
