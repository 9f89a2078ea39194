"""The timeline faces: CLI verbs, MCP tools, Perfetto and PNG exports, on the real fixtures."""
from __future__ import annotations

import json

import anyio
from conftest import FIXTURES
from mcp import Client

from mcp_server.faces.cli import main as cli_main
from mcp_server.faces.server import mcp

TL = FIXTURES / "timeline"
EVENTS = "load,compute,reduce,store,done"


def test_cli_analyze_json_and_exports(tmp_path, capsys):
    pf, png = tmp_path / "t.json", tmp_path / "t.png"
    rc = cli_main(["timeline", "analyze", str(TL / "imbalanced_probe.bin"), "--events", EVENTS, "--json",
                   "--perfetto", str(pf), "--png", str(png)])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"records", "warnings", "phases", "probe_overhead", "verdicts", "critical_path"} <= set(doc)
    ph = {p["name"]: p for p in doc["phases"]}
    for key in ("name", "occurrences", "imbalance", "slowest_blocks", "last_blocks", "last_block_always_same"):
        assert key in ph["compute"]
    for key in ("wall_ns", "slowest_ns", "mean_ns", "skew_ns", "last_block"):
        assert key in ph["compute"]["occurrences"][0]
    assert ph["reduce"]["last_blocks"] == [17, 17, 17] and doc["records"] == 6600
    assert doc["outputs"] == {"perfetto": str(pf), "png": str(png)}
    # Perfetto: one track per block/group grouped by SM; X events = intervals, instants as i
    tr = json.loads(pf.read_text())
    ev = tr["traceEvents"]
    xs = [e for e in ev if e["ph"] == "X"]
    assert len(xs) == doc["intervals"] and {e["name"] for e in xs} == {"load", "compute", "reduce", "store"}
    assert sum(1 for e in ev if e["ph"] == "i") == 264
    procs = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert len(procs) == 132 and all(p.startswith("SM ") for p in procs)
    threads = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "block 17 group 1" in threads and len(threads) == 264
    slow = [e for e in xs if e["name"] == "compute" and e["args"]["block"] == 37]
    assert slow and all(e["dur"] > 150 for e in slow)  # us
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_cli_text_report_and_compare(capsys):
    assert cli_main(["timeline", "analyze", str(TL / "imbalanced_probe.bin"), "--events", str(TL / "phases.events")]) == 0
    text = capsys.readouterr().out
    assert "Verdicts" in text and "[fixed_straggler] reduce" in text and "Block 17" in text
    assert cli_main(["timeline", "compare", str(TL / "imbalanced_probe.bin"), str(TL / "balanced_probe.bin"),
                     "--events", EVENTS, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["d_span_ns"] < 0 and [p["name"] for p in doc["phases"]] == ["load", "compute", "reduce", "store"]


def test_cli_bad_input_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"1234567")
    assert cli_main(["timeline", "analyze", str(bad), "--events", "a"]) == 2
    err = capsys.readouterr().err
    assert "not a multiple of 8" in err and "Traceback" not in err


def test_mcp_tools_listed_and_answer(tmp_path):
    bad = tmp_path / "zero.bin"
    bad.write_bytes(b"\x00" * 64)

    async def go():
        async with Client(mcp) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            ok = await c.call_tool("analyze_timeline", {
                "buffer_path": str(TL / "imbalanced_probe.bin"),
                "event_names": ["load", "compute", "reduce", "store", "done"]})
            forced = await c.call_tool("analyze_timeline", {
                "buffer_path": str(TL / "imbalanced_legacy.bin"), "tag_layout": "legacy",
                "event_names": ["load", "compute", "reduce", "store", "done"]})
            err = await c.call_tool("analyze_timeline", {"buffer_path": str(bad), "event_names": ["x"]})
            cmp = await c.call_tool("compare_timelines", {
                "before_path": str(TL / "imbalanced_probe.bin"), "after_path": str(TL / "balanced_probe.bin"),
                "event_names": ["load", "compute", "reduce", "store", "done"]})
            return tools, ok, forced, err, cmp

    tools, ok, forced, err, cmp = anyio.run(go)
    t = tools["analyze_timeline"]
    assert {"buffer_path", "event_names", "tag_layout"} <= set(t.input_schema["properties"])
    assert t.input_schema["required"] == ["buffer_path"]
    assert {"records", "warnings", "phases", "probe_overhead"} <= set(t.output_schema["properties"])
    assert "compare_timelines" in tools
    assert not ok.is_error
    ph = {p["name"]: p for p in ok.structured_content["phases"]}
    assert set(ph["compute"]["slowest_blocks"][:3]) == {5, 37, 90}
    assert ph["reduce"]["last_block_always_same"] is True
    assert not forced.is_error and forced.structured_content["tag_layout"] == "legacy"
    assert err.is_error and "header" in err.content[0].text and "Traceback" not in err.content[0].text
    assert not cmp.is_error and cmp.structured_content["d_span_ns"] < 0


def test_mcp_event_names_as_file_path():
    async def go():
        async with Client(mcp) as c:
            return await c.call_tool("analyze_timeline", {
                "buffer_path": str(TL / "triton_rows.bin"), "event_names": str(TL / "triton_rows.events")})

    res = anyio.run(go)
    assert not res.is_error
    assert [p["name"] for p in res.structured_content["phases"]] == ["rowsum", "scale"]


def test_skill_frontmatter_and_commands():
    """skills/kernel-timeline-analysis/SKILL.md: Agent Skills frontmatter naming tools the server has,
    and the CLI commands it teaches parse."""
    import re
    from pathlib import Path

    from mcp_server.faces.cli import build_parser

    text = (Path(__file__).resolve().parents[1] / "skills" / "kernel-timeline-analysis" / "SKILL.md").read_text()
    assert text.startswith("---\n")
    front = text.split("---\n", 2)[1]
    keys = {m.group(1) for m in re.finditer(r"^([a-z-]+):", front, re.M)}
    assert {"name", "description", "license", "compatibility", "metadata", "allowed-tools"} <= keys
    assert re.search(r"^name: kernel-timeline-analysis$", front, re.M)
    wanted = set(re.findall(r"mcp__kernelscope__([a-z_]+)", front))
    assert wanted == {"analyze_timeline", "compare_timelines"}

    async def names():
        async with Client(mcp) as c:
            return {t.name for t in (await c.list_tools()).tools}

    assert wanted <= anyio.run(names)
    for verdict in ("fixed_straggler", "moving_straggler", "imbalance", "start_skew", "barrier_wait", "balanced"):
        assert f"`{verdict}`" in text
    p = build_parser()
    a = p.parse_args(["timeline", "analyze", "buf.bin", "--events", "load,compute", "--png", "g.png",
                      "--perfetto", "t.json", "--json"])
    assert a.event_names == "load,compute" and a.png_path == "g.png" and a.perfetto_path == "t.json" and a._json
    c = p.parse_args(["timeline", "compare", "a.bin", "b.bin", "--events", "x"])
    assert (c.before_path, c.after_path, c.event_names) == ("a.bin", "b.bin", "x")


def test_perfetto_export_is_capped_with_a_warning(tmp_path):
    from mcp_server.timeline.analysis import analyze_decoded
    from mcp_server.timeline.decode import decode_buffer
    from mcp_server.timeline.export import write_perfetto

    dec = decode_buffer(TL / "imbalanced_probe.bin")
    res = analyze_decoded(dec, (TL / "phases.events").read_text().split())
    total = int(dec.event.size)
    out = write_perfetto(dec, res, tmp_path / "cap.json", max_intervals=100)
    doc = json.loads(out.read_text())
    phases = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(phases) == 100 and doc["otherData"]["intervals_total"] == total
    first = sorted(dec.begin.tolist())[:100]
    assert sorted(round(e["ts"] * 1000) for e in phases) == first  # the earliest intervals are kept
    w = [x for x in res.warnings if x.code == "perfetto_capped"]
    assert w and w[0].count == total - 100
    full = json.loads(write_perfetto(dec, res, tmp_path / "all.json").read_text())
    assert sum(e["ph"] == "X" for e in full["traceEvents"]) == total
