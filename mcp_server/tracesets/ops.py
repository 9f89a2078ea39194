"""Operations of the trace-set engine, declared once (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from mcp_server.core.operation import READ_ONLY, WRITES_FILES, Operation
from mcp_server.tracesets.models import TraceSetAnalysis, TraceSetComparison
from mcp_server.tracesets.requests import AnalyzeTraceSetRequest, CompareTraceSetsRequest

OPERATIONS = [
    Operation(
        tool="analyze_trace_set", verb="traceset analyze", title="Analyze the per-rank traces of a multi-rank run",
        help="every rank's trace at once: per-rank totals, module x rank times, the straggler rank",
        description=(
            "Analyze one trace per rank of a tensor/data-parallel run (files, a directory or a glob; rank from "
            "distributedInfo, else the file name) in parallel worker processes (or Ray tasks), then read them "
            "across ranks: per-rank totals, per module instance and per layer the time on every rank with the "
            "slowest rank and slowest/mean imbalance, whether one rank is slowest in every layer (a fixed "
            "straggler: its GPU, clocks, placement) or the slow rank moves (load or routing imbalance), and the "
            "per-rank category budget. `kernelscope analyze DIR|GLOB|FILES...` runs it too."),
        request=AnalyzeTraceSetRequest, result=TraceSetAnalysis,
        engine="mcp_server.tracesets.analyze:analyze_trace_set", render="mcp_server.tracesets.render:render_set",
        hints=WRITES_FILES, positional=("paths",), aliases={"output_xlsx": ("-o", "--output"),
                                                            "output_html": ("--html",)},
        progress=True, outputs={"output_xlsx": "xlsx", "output_html": "html"}, takes_over="analyze",
        side_outputs={"output_xlsx": "{stem}.rank*{suffix}"},  # rank_report_path(): each rank's own workbook
    ),
    Operation(
        tool="compare_trace_sets", verb="traceset compare", title="Compare two multi-rank runs rank by rank",
        help="two multi-rank runs: rank by rank and per module (mean and slowest rank)",
        description=(
            "Compare two multi-rank runs (each a directory of per-rank traces or a glob): each rank's total A vs "
            "B, and per module instance the mean over ranks and the slowest rank's time (what the step waits "
            "for) A vs B, largest change first; each run's own straggler reading. `kernelscope compare "
            "RUN_A_DIR RUN_B_DIR` runs it too."),
        request=CompareTraceSetsRequest, result=TraceSetComparison,
        engine="mcp_server.tracesets.analyze:compare_trace_sets", render="mcp_server.tracesets.render:render_compare",
        hints=READ_ONLY, positional=("a", "b"), progress=True, takes_over="compare",
    ),
]
