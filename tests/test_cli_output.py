"""Output that misled a new user: a trace set named late by its collectives but not by kernel time, a timeline
warning on every buffer, budget warnings about modules it does not use (and without their codes)."""
from __future__ import annotations

import io

from conftest import FIXTURES, TRACES
from rich.console import Console

from mcp_server.faces.cli import main

SETS = FIXTURES / "tracesets"
TL = FIXTURES / "timeline"


def test_a_late_rank_by_collectives_but_no_straggler_by_kernel_time_says_why_both_hold():
    from mcp_server.tracesets.analyze import analyze_trace_set
    from mcp_server.tracesets.render import render_set

    res = analyze_trace_set([str(SETS / "tp4_gloo_straggler")])
    assert res.straggler.kind != "fixed" and res.collectives is not None and res.collectives.straggler_rank == 2
    buf = io.StringIO()
    render_set(res, Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    assert "reading both: kernel time names no straggler, yet rank 2 arrives late at the collectives" in text
    assert "delayed before it launches them" in text
    plain = analyze_trace_set([str(SETS / "tp4_gloo")])  # nobody late: nothing to reconcile
    buf = io.StringIO()
    render_set(plain, Console(file=buf, width=200, color_system=None))
    assert "reading both" not in buf.getvalue()


def test_the_demo_names_the_late_rank_as_the_collectives_do():
    import inspect

    from mcp_server.faces import demo
    src = inspect.getsource(demo.step_tracesets)
    assert "rank 2 late each layer" not in src and "rank 2 starts each" in src


def test_an_exactly_sized_guarded_buffer_is_not_called_truncated(capsys):
    """Every demo timeline warned truncation_possible: kernelscope's writers keep a bounds guard, so a buffer
    filled to its last round with the overflow bit clear lost nothing; a legacy (FlashInfer) one still warns."""
    events = "load,compute,reduce,store,done"
    assert main(["timeline", "analyze", str(TL / "imbalanced_probe.bin"), "--events", events, "--width", "120"]) == 0
    assert "truncation_possible" not in capsys.readouterr().out
    assert main(["timeline", "analyze", str(TL / "imbalanced_legacy.bin"), "--events", events, "--width", "120"]) == 0
    assert "warning truncation_possible" in capsys.readouterr().out
    assert main(["timeline", "analyze", str(TL / "overflow_probe.bin"), "--events", events, "--width", "120"]) == 0
    assert "warning overflow" in capsys.readouterr().out  # what the guard says when it did drop records


def test_budget_keeps_only_its_own_warnings_and_prints_their_codes(capsys):
    from mcp_server.compare.budget import budget

    mixed, graph = TRACES / "llama_decode_mixed.json.gz", TRACES / "llama_decode_graph.json.gz"
    res = budget(str(mixed), str(graph), labels=["mixed", "graph"])
    codes = {w.code for w in res.warnings}
    assert codes == {"step_count_differs", "per_step"}  # not unattributed_kernels / replays_unattributed
    assert main(["budget", str(mixed), str(graph), "--labels", "mixed", "graph", "--width", "120"]) == 0
    out = capsys.readouterr().out
    assert "warning step_count_differs:" in out and "warning per_step:" in out and "no owning module" not in out


def test_demo_headings_and_tables_fit_80_columns():
    """At 80 columns (make demo piped) a long section heading keeps its description whole on the next line
    (rich cut 'rank 2 starts each all-reduce late' to 'rank 2…'), and the tables fit."""
    from mcp_server.faces import demo
    console = Console(record=True, width=80)
    for step in (demo.step_tracesets, demo.step_compass):
        step(console)
    lines = console.export_text().splitlines()
    assert max(len(x) for x in lines) <= 80
    assert not [x for x in lines if x.startswith("─") and "…" in x]
    i = next(n for n, x in enumerate(lines) if "analyze tracesets/tp4_gloo_straggler/" in x)
    assert lines[i + 1] == "4 TP ranks, gloo all-reduces; rank 2 starts each all-reduce late, host-side"
