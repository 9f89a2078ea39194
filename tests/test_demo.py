"""The demo's budget and timeline steps (make demo) on the bundled H200 data."""
from __future__ import annotations

import re

from rich.console import Console

from mcp_server.faces import demo


def _run(step) -> str:
    console = Console(record=True, width=220)
    step(console)
    return console.export_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_demo_runs_every_job():
    assert demo.STEPS == [demo.step_analyze, demo.step_compare, demo.step_budget, demo.step_tracesets,
                          demo.step_timeline, demo.step_compass]


def test_demo_trace_sets_name_the_straggler_and_the_moving_rank():
    text = _flat(_run(demo.step_tracesets))
    assert "straggler: rank 1 (fixed): rank 1 is the slowest in 4 of 4 layers" in text
    assert "the slow rank moves: 4 different ranks are slowest in the 4 imbalanced layers" in text
    assert "balanced: no straggler; tokens: straggler: rank 3 (fixed)" in text
    assert "rank 2 arrives late: rank 2 arrives last, by at least 834.8 us, in 4 of 4 layers" in text


def test_demo_budget_rows_sorted_by_gap_with_the_fused_attention_kernel_on_sdpa():
    text = _run(demo.step_budget)
    rows = {}
    for ln in text.splitlines():
        cells = [c.strip() for c in re.split(r"│|\s{2,}", ln) if c.strip()]  # boxed or 80-column table
        if len(cells) == 7 and re.fullmatch(r"[+-]\d+\.\d", cells[5]):
            rows[cells[0]] = float(cells[5])
    order = [k for k in rows if k != "total"]
    assert [abs(rows[k]) for k in order] == sorted((abs(rows[k]) for k in order), reverse=True)
    # eager attention's matmul/mask/scale chain is gemm + elementwise work that the fused kernel absorbs
    assert rows["elementwise"] < 0 and rows["gemm"] < 0 and rows["attention"] > 0
    assert abs(rows["total"] - sum(rows[k] for k in order)) < 0.3  # rows are rounded to 0.1 us


def test_demo_timeline_names_the_planted_stragglers_and_the_fix():
    text = _flat(_run(demo.step_timeline))
    assert "[imbalance] compute" in text and "slowest blocks by mean: 5 (170" in text
    assert "Block 17 finishes last in every occurrence" in text
    assert re.search(r"compute .*3\.7\dx -> 1\.0\dx", text)


def test_demo_shows_the_kernel_compass_path_on_committed_h200_data():
    text = _flat(_run(demo.step_compass))
    assert "memory_bound" in text and "dram" in text            # the 16-layer BMM, cold
    assert "do not quantize" in text                              # the one-layer BMM, L2-resident
    assert "2.917" in text and "accepted" in text and "reverted" in text  # the loop's two decisions
