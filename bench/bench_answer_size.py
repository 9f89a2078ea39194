#!/usr/bin/env python3
"""Benchmark: the size of every MCP tool's default answer on the committed real data.

An agent pays for every byte a tool returns. Each tool is called in-process through the
official MCP client with its default arguments (a summary: ``top_n`` rows per list) and
again with ``detail=true`` where it takes it; the bytes of the structured content (JSON) are
reported. Goal: under 16 KB for every tool by default. Tools that need a GPU, ncu or the
network are called where this machine can answer them and listed as such otherwise.

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
        "timeline_analyze": [("imbalanced_probe", {"buffer_path": str(TL / "imbalanced_probe.bin"),
                                                   "event_names": str(TL / "phases.events")})],
        "timeline_compare": [("imbalanced vs balanced", {"before_path": str(TL / "imbalanced_probe.bin"),
                                                         "after_path": str(TL / "balanced_probe.bin"),
                                                         "event_names": str(TL / "phases.events")})],
    }
    sets = FIX / "tracesets"
    cases["analyze_trace_set"] = [("4 ranks, straggler", {"paths": [str(sets / "straggler")]}),
                                  ("4 ranks, moving", {"paths": [str(sets / "moving")]})]
    cases["compare_trace_sets"] = [("balanced vs tokens", {"a": str(sets / "balanced"), "b": str(sets / "tokens")})]
    if grown is not None:
        cases["analyze_trace"].append((f"grown {grown.stat().st_size >> 20} MB gz", {"trace_path": str(grown)}))
    ledger = ROOT / "examples" / "mla_decode" / "h200" / "ledger.db"
    cases["ledger_list"] = [("MLA example ledger", {"ledger": str(ledger)})]
    cases["ledger_show"] = [("MLA example, experiment 1", {"ledger": str(ledger), "id": 1})]
    cases["ledger_export"] = [("MLA example, markdown", {"ledger": str(ledger), "format": "md"})]
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
    return len(json.dumps(data, ensure_ascii=False).encode())


async def _measure(cases: dict[str, list[tuple[str, dict[str, Any]]]]) -> list[dict[str, Any]]:
    from mcp import Client

    from mcp_server.server import mcp

    rows = []
    async with Client(mcp) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        for name, tool in tools.items():
            takes_detail = "detail" in tool.input_schema.get("properties", {})
            for label, args in cases.get(name, []):
                res = await c.call_tool(name, args)
                row = {"tool": name, "case": label, "error": res.content[0].text if res.is_error else None,
                       "default_bytes": None if res.is_error else _size(res.structured_content)}
                if takes_detail and not res.is_error:
                    full = await c.call_tool(name, {**args, "detail": True})
                    row["detail_bytes"] = None if full.is_error else _size(full.structured_content)
                rows.append(row)
            if name not in cases:
                rows.append({"tool": name, "case": "(runs GPU code or a target: not measured here)",
                             "default_bytes": None})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
        rows = anyio.run(_measure, _cases(tmp, grown))
    fmt: Callable[[Any], str] = lambda b: "—" if b is None else f"{b / 1024:.1f} KB"  # noqa: E731
    if a.markdown:
        print("| tool | case | default answer | detail=true | under 16 KB |")
        print("|---|---|---|---|---|")
    for r in rows:
        ok = "" if r.get("default_bytes") is None else ("yes" if r["default_bytes"] < GOAL else "NO")
        extra = f" error: {r['error'][:80]}" if r.get("error") else ""
        if a.markdown:
            print(f"| `{r['tool']}` | {r['case']} | {fmt(r.get('default_bytes'))} | "
                  f"{fmt(r.get('detail_bytes'))} | {ok}{extra} |")
        else:
            print(f"{r['tool']:22s} {r['case'][:40]:40s} {fmt(r.get('default_bytes')):>10s} "
                  f"{fmt(r.get('detail_bytes')):>10s} {ok}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
