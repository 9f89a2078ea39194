#!/usr/bin/env python3
"""Benchmark: the size of every MCP tool's default answer on the committed real data, as the client receives it.

An agent pays for every byte a tool returns. The server is started over stdio (``python -m
mcp_server``, as Claude Code starts it) behind a tap that records the length of every JSON-RPC line it
writes; each tool is called through the official MCP Python client with its default arguments (a
summary: ``top_n`` rows per list) and again with ``detail=true`` where it takes it. Reported: the
structured content alone (compact JSON) and the whole message the client received (the JSON-RPC
response: structured content, text block and envelope). Goal: the whole default message at most
16 KB for every tool. Tools that need a GPU, ncu or the network are called where this machine can
answer them and listed as such otherwise.

    .venv/bin/python bench/bench_answer_size.py [--grow-mb 30] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FIX = ROOT / "tests" / "fixtures"
TR = FIX / "traces"
TL = FIX / "timeline"
GOAL = 16 * 1024


def _cases(tmp: Path, grown: Path | None) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    from mcp_server.traces import analyze_trace

    report = tmp / "eager.xlsx"
    analyze_trace(TR / "llama_prefill_eager.json.gz", output_xlsx=report)
    registry = tmp / "registry.md"
    registry.write_text(
        "| key | kind | repo | env | package | jql_project | enabled |\n|---|---|---|---|---|---|---|\n"
        "| self-local | local-git | kernelscope/kernelscope | KS_SELF_ROOT | | | yes |\n")
    os.environ["KS_SELF_ROOT"] = str(ROOT)
    os.environ["KERNELSCOPE_ROOTS"] = os.pathsep.join([str(tmp), str(ROOT)])  # outputs go to tmp (confinement)
    cases: dict[str, list[tuple[str, dict[str, Any]]]] = {
        "analyze_trace": [("dsv3_prefill", {"trace_path": str(TR / "dsv3_prefill.json.gz")}),
                          ("tp2_decode_mixed", {"trace_path": str(TR / "tp2_decode_mixed.json.gz")})],
        "recategorize": [("eager report", {"paths": [str(report)], "output_dir": str(tmp / "recat")})],
        "budget": [("eager vs sdpa", {"a": str(TR / "llama_prefill_eager.json.gz"),
                                      "b": str(TR / "llama_prefill_sdpa.json.gz")})],
        "diff_modules": [("eager vs sdpa", {"a": str(TR / "llama_prefill_eager.json.gz"),
                                            "b": str(TR / "llama_prefill_sdpa.json.gz")}),
                         ("dsv3 vs llama", {"a": str(TR / "dsv3_prefill.json.gz"),
                                            "b": str(TR / "llama_prefill_eager.json.gz")})],
        "find_references": [("local git, 'trace'", {"keyword": "trace", "registry": str(registry),
                                                     "no_cache": True})],
        "analyze_timeline": [("imbalanced_probe", {"buffer_path": str(TL / "imbalanced_probe.bin"),
                                                   "event_names": str(TL / "phases.events")})],
        "compare_timelines": [("imbalanced vs balanced", {"before_path": str(TL / "imbalanced_probe.bin"),
                                                         "after_path": str(TL / "balanced_probe.bin"),
                                                         "event_names": str(TL / "phases.events")})],
    }
    cases["make_repro"] = [("dsv3_prefill", {"trace_path": str(TR / "dsv3_prefill.json.gz"),
                                             "output_dir": str(tmp / "repro_dsv3"), "overwrite": True}),
                           ("llama eager, LlamaAttention", {"trace_path": str(TR / "llama_prefill_eager.json.gz"),
                                                            "module": "LlamaAttention",
                                                            "output_dir": str(tmp / "repro_attn"), "overwrite": True})]
    sets = FIX / "tracesets"
    cases["analyze_trace_set"] = [("4 ranks, straggler", {"paths": [str(sets / "straggler")]}),
                                  ("4 ranks, moving", {"paths": [str(sets / "moving")]})]
    cases["compare_trace_sets"] = [("balanced vs tokens", {"a": str(sets / "balanced"), "b": str(sets / "tokens")})]
    if grown is not None:
        cases["analyze_trace"].append((f"grown {grown.stat().st_size >> 20} MB gz", {"trace_path": str(grown)}))
    ledger = ROOT / "examples" / "mla_decode" / "h200" / "ledger.db"
    cases["list_experiments"] = [("MLA example ledger", {"ledger": str(ledger)})]
    cases["show_experiment"] = [("MLA example, experiment 1", {"ledger": str(ledger), "id": 1})]
    cases["export_ledger"] = [("MLA example, markdown", {"ledger": str(ledger), "format": "md"})]
    cases["validate_candidate"] = [("CPU spec, pointer-caching candidate", {
        "spec_path": str(FIX / "validate" / "cpu.toml"),
        "candidate": str(FIX / "validate" / "cand_cache_ptr.py") + ":candidate"})]
    ncu = FIX / "ncu"
    reps = sorted(ncu.glob("*.ncu-rep")) + sorted(ncu.glob("*raw*.csv"))
    if reps:
        for tool in ("classify_bottleneck", "select_candidate", "parse_ncu"):
            cases[tool] = [(reps[0].name, {"path": str(reps[0])})]
    return cases


def _size(data: Any) -> int:
    return len(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode())


def tap(log: str, argv: list[str]) -> int:
    """Run ``argv`` with our stdin and stdout, appending the byte length of each line it writes to ``log``."""
    import threading

    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None

    def pump_in() -> None:
        assert child.stdin is not None
        for line in sys.stdin.buffer:
            child.stdin.write(line)
            child.stdin.flush()
        child.stdin.close()

    threading.Thread(target=pump_in, daemon=True).start()
    with open(log, "a") as fh:
        for line in child.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
            kind = "response" if b'"result"' in line[:200] or b'"error"' in line[:200] else "other"
            size = len(line.rstrip(b"\n"))
            fh.write(f"{kind} {size}\n")
            fh.flush()
    return child.wait()


def _last_response(log: Path) -> int:
    lines = [x.split() for x in log.read_text().splitlines()]
    return int([n for k, n in lines if k == "response"][-1])


async def _measure(cases: dict[str, list[tuple[str, dict[str, Any]]]], log: Path) -> list[dict[str, Any]]:
    from mcp import Client, StdioServerParameters

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    params = StdioServerParameters(command=sys.executable, args=[
        str(Path(__file__).resolve()), "--tap", str(log), "--", sys.executable, "-m", "mcp_server"], env=env)
    rows = []
    async with Client(params, read_timeout_seconds=600) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        for name, tool in tools.items():
            takes_detail = "detail" in tool.input_schema.get("properties", {})
            for label, args in cases.get(name, []):
                res = await c.call_tool(name, args)
                row = {"tool": name, "case": label, "error": res.content[0].text if res.is_error else None,
                       "structured": None if res.is_error else _size(res.structured_content),
                       "message": None if res.is_error else _last_response(log)}
                if takes_detail and not res.is_error:
                    full = await c.call_tool(name, {**args, "detail": True})
                    row["detail"] = None if full.is_error else _last_response(log)
                rows.append(row)
            if name not in cases:
                rows.append({"tool": name, "case": "(runs GPU code or a target: not measured here)"})
    return rows


def main() -> int:
    if len(sys.argv) > 3 and sys.argv[1] == "--tap" and sys.argv[3] == "--":
        return tap(sys.argv[2], sys.argv[4:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--grow-mb", type=float, default=0, help="also analyze a trace grown to this many MB of JSON")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        grown = None
        if a.grow_mb:
            out = tmp / "grown.json"
            subprocess.run([sys.executable, str(ROOT / "bench" / "bench_trace.py"), "--grow-only", str(out),
                            "--mb", str(a.grow_mb)], check=True)
            grown = out.with_suffix(".json.gz") if out.with_suffix(".json.gz").exists() else out
        rows = anyio.run(_measure, _cases(tmp, grown), tmp / "tap.log")
    fmt: Callable[[Any], str] = lambda b: "—" if b is None else f"{b / 1024:.1f} KB"  # noqa: E731
    if a.markdown:
        print("| tool | case | structured content | whole message (default) | whole message (detail=true) "
              "| at most 16 KB |")
        print("|---|---|---|---|---|---|")
    worst = 0
    for r in rows:
        msg = r.get("message")
        worst = max(worst, msg or 0)
        ok = "" if msg is None else ("yes" if msg <= GOAL else "NO")
        extra = f" error: {r['error'][:80]}" if r.get("error") else ""
        if a.markdown:
            print(f"| `{r['tool']}` | {r['case']} | {fmt(r.get('structured'))} | {fmt(msg)} | "
                  f"{fmt(r.get('detail'))} | {ok}{extra} |")
        else:
            print(f"{r['tool']:22s} {r['case'][:40]:40s} {fmt(r.get('structured')):>10s} {fmt(msg):>10s} "
                  f"{fmt(r.get('detail')):>10s} {ok}{extra}")
    print(f"largest default message: {worst} bytes (goal at most {GOAL})")
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
