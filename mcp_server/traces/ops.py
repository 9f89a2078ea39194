"""Operations of the traces engine, declared once (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from mcp_server.core.operation import WRITES_FILES, Operation
from mcp_server.traces.models import TraceAnalysis
from mcp_server.traces.requests import AnalyzeTraceRequest

OPERATIONS = [
    Operation(
        tool="analyze_trace", verb="analyze", title="Analyze a PyTorch-profiler trace",
        help="attribute a trace's GPU kernels to nn.Modules; summary, --json or an xlsx report",
        description=(
            "Attribute every GPU kernel of a PyTorch-profiler (Kineto) trace (.json/.json.gz, NVIDIA or AMD, "
            "eager or CUDA-graph) to its nn.Module, category and phase; return module and category totals. "
            "Optionally write the report workbook (upstream trace_module_analyzer layout plus full kernel table). "
            "For one trace per rank of a multi-rank run use analyze_trace_set (the CLI's `analyze DIR|GLOB` does)."),
        request=AnalyzeTraceRequest, result=TraceAnalysis,
        # not the read-ahead entry (mcp_server.traces): the CLI imports this module's native libraries before
        # it applies its memory limit (OpenBLAS cannot start under a small one: tests/test_faces.py)
        engine="mcp_server.traces.analyze:analyze_trace", render="mcp_server.traces.render:render_analysis",
        hints=WRITES_FILES, positional=("trace_path",), aliases={"output_xlsx": ("-o", "--output")},
        progress=True, outputs={"output_xlsx": "xlsx"},
    ),
]
