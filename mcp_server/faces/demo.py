"""``python -m mcp_server.faces.demo`` (``make demo``): the main jobs on the bundled H200 traces.

``main()`` runs the steps in ``STEPS`` in order; each step takes the rich
Console and prints its own section. Later steps (e.g. a comparison) are
appended to ``STEPS``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.rule import Rule

from mcp_server.core.paths import DEMO_DIR, package_file


def _rule(console: Console, text: str) -> None:
    """A section heading; one too long for the width (rich would cut it) keeps its head in the rule and its
    description on the next line, whole."""
    from mcp_server.core.textable import print_line

    if len(text) + 6 <= console.width:
        console.print(Rule(text))
        return
    cut = min((i for i in (text.find(" ("), text.find(": ")) if i > 0), default=-1)
    if cut < 0:
        console.print(Rule())
        print_line(console, text)
        return
    console.print(Rule(text[:cut]))
    rest = text[cut:].strip()
    if rest.startswith("(") and rest.endswith(")"):
        rest = rest[1:-1]
    print_line(console, f"[dim]{rest.removeprefix(': ')}[/]")


def demo_file(name: str) -> Path:
    """A bundled demo file, shipped in the package (``mcp_server/demo_data``; in the repository
    those are symlinks to the real fixtures under ``tests/fixtures``), so the demo runs from an
    installed wheel too."""
    return package_file(DEMO_DIR, name)


#: (file, reference trace or None, what it is)
TRACE_FIXTURES: list[tuple[str, str | None, str]] = [
    ("llama_prefill_eager.json.gz", None, "Llama-style prefill, eager attention"),
    ("llama_prefill_sdpa.json.gz", None, "Llama-style prefill, sdpa attention"),
    ("llama_decode_mixed.json.gz", None, "decode: 1 eager step + 3 CUDA-graph replays"),
    ("llama_decode_graph.json.gz", "llama_decode_mixed.json.gz",
     "decode: CUDA-graph replays only, attributed from the mixed trace"),
    ("dsv3_prefill.json.gz", None, "DeepSeek-V3-style prefill (MLA + MoE)"),
]


def step_analyze(console: Console) -> None:
    """Analyze each bundled trace and print its summary."""
    from mcp_server.traces import analyze_trace
    from mcp_server.traces.render import render_analysis

    for name, ref, what in TRACE_FIXTURES:
        _rule(console, f"analyze {name}: {what}")
        res = analyze_trace(demo_file(name), reference_trace=demo_file(ref) if ref else None)
        render_analysis(res, console, max_modules=12, max_tree_depth=2)


def step_compare(console: Console) -> None:
    """Compare the eager and sdpa prefills module by module (diff_modules)."""
    from mcp_server.compare.diff import diff_modules, replacements
    from mcp_server.compare.render import render_diff
    from mcp_server.core.kernel_names import display_kernel_name

    _rule(console, "compare llama_prefill_eager vs llama_prefill_sdpa (diff_modules)")
    res = diff_modules(demo_file("llama_prefill_eager.json.gz"), demo_file("llama_prefill_sdpa.json.gz"),
                       labels=["eager", "sdpa"])
    render_diff(res, console, panels=1)
    att = next((b for b in res.blocks if b.block == "attn_core"), None)
    if att is not None:
        for a_name, b_name, how in replacements(att):
            if "softmax" in a_name:
                console.print(f"[bold]attn_core:[/] eager's {display_kernel_name(a_name, 60)} path is replaced by "
                              f"sdpa's fused {display_kernel_name(b_name, 70)} (paired by {how}); "
                              f"{att.a_count} -> {att.b_count} launches, {att.gap_us:+.1f} us")


def step_budget(console: Console) -> None:
    """Category budget of the same two prefills (the view that also works on CUDA-graph decode)."""
    from mcp_server.compare.budget import budget
    from mcp_server.compare.render import render_budget

    _rule(console, "budget llama_prefill_eager vs llama_prefill_sdpa")
    res = budget(demo_file("llama_prefill_eager.json.gz"), demo_file("llama_prefill_sdpa.json.gz"),
                 labels=["eager", "sdpa"])
    render_budget(res, console)


def step_timeline(console: Console) -> None:
    """Probe timeline of a persistent kernel: the planted imbalance, then before/after a rebalance."""
    from mcp_server.timeline import analyze_timeline, compare_timelines
    from mcp_server.timeline.render import render_analysis, render_comparison

    before, after = demo_file("imbalanced_probe.bin"), demo_file("balanced_probe.bin")
    names = demo_file("phases.events")
    _rule(console, "timeline analyze imbalanced_probe.bin (persistent kernel, grid barriers, H200)")
    render_analysis(analyze_timeline(before, names), console)
    _rule(console, "timeline compare imbalanced_probe.bin -> balanced_probe.bin")
    render_comparison(compare_timelines(before, after, names), console)


def step_compass(console: Console) -> None:
    """kernel-compass without a GPU: classify and select on H200 Nsight Compute reports, then the
    experiment log of the worked example's loop (recorded on the H200)."""
    from mcp_server.ledger.engine import ledger_show
    from mcp_server.ledger.render import render_show
    from mcp_server.ncu.classify import classify_bottleneck
    from mcp_server.ncu.render import render_classification, render_selection
    from mcp_server.ncu.select import select_candidate

    for name, what in (("targets_none.ncu-rep.xz", "six targets of known bottleneck, warm"),
                       ("mla_wuv_16layers_cold.ncu-rep.xz", "DeepSeek-V3 W_UV BMM, 16 stacked layers, cold"),
                       ("mla_wuv_1layer_warm.ncu-rep.xz", "the same BMM, one layer, warm")):
        _rule(console, f"classify {name}: {what}")
        render_classification(classify_bottleneck(str(demo_file(name))), console)
    _rule(console, "select targets_none.ncu-rep.xz")
    render_selection(select_candidate(str(demo_file("targets_none.ncu-rep.xz"))), console)
    _rule(console, "ledger show 1 and 2: the worked example's loop on the H200 (examples/mla_decode)")
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:  # SQLite opens its WAL beside the file: read a copy
        ledger = shutil.copy(demo_file("mla_example_ledger.db"), Path(tmp) / "ledger.db")
        for exp in (1, 2):
            render_show(ledger_show(exp, ledger=str(ledger)), console)


def step_tracesets(console: Console) -> None:
    """Multi-rank runs: four gloo ranks on one H200, a fixed straggler, a moving slow rank, two runs compared."""
    from mcp_server.tracesets.analyze import analyze_trace_set, compare_trace_sets
    from mcp_server.tracesets.render import render_compare, render_set

    sets = demo_file("tracesets")
    for name, what in (("straggler", "4 ranks: rank 1 does extra work in every layer"),
                       ("moving", "4 ranks: layer L's extra work runs on rank L % 4"),
                       ("tp4_gloo_straggler", "4 TP ranks, gloo all-reduces; rank 2 starts each all-reduce late, "
                                              "host-side")):
        _rule(console, f"analyze tracesets/{name}/ ({what})")
        render_set(analyze_trace_set([str(sets / name)]), console)
    _rule(console, "compare tracesets/balanced/ tracesets/tokens/ (rank 3 given 8x the tokens)")
    render_compare(compare_trace_sets(str(sets / "balanced"), str(sets / "tokens")), console)


STEPS: list[Callable[[Console], None]] = [
    step_analyze,
    step_compare,
    step_budget,
    step_tracesets,
    step_timeline,
    step_compass,
]


def main() -> int:
    from mcp_server.core.textable import PipeConsole, quiet_stdout

    console = PipeConsole(highlight=False, emoji=False)
    try:
        for step in STEPS:
            step(console)
    except BrokenPipeError:  # `make demo | head`: the reader had what it wanted
        quiet_stdout()
    return 0


if __name__ == "__main__":
    sys.exit(main())
