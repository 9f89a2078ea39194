"""The read-ahead entry of the trace analyzer for Python callers (``mcp_server.traces.analyze_trace``): it starts
reading the trace before the heavy imports. The faces call ``mcp_server.traces.analyze.analyze_trace`` (the same
request, the same analysis).
"""
from __future__ import annotations

from typing import Optional

from mcp_server.core.operation import engine
from mcp_server.core.vocab import ProgressFn
from mcp_server.traces.models import TraceAnalysis
from mcp_server.traces.requests import AnalyzeTraceRequest


@engine(AnalyzeTraceRequest)
def analyze_trace(req: AnalyzeTraceRequest, progress: Optional[ProgressFn] = None) -> TraceAnalysis:
    """Attribute every GPU kernel of a Kineto trace (.json/.json.gz) to its nn.Module, category and phase.

    Returns a ``TraceAnalysis`` with the per-kernel DataFrame on ``.kernels``
    (columns ``KERNEL_COLUMNS``). ``progress(done, total, message)`` is called at
    stage boundaries. Raises ``FileMissingError`` / ``TraceFormatError`` naming the file.
    """
    from mcp_server.traces._reader import blocks, check_path

    reader = blocks(check_path(req.trace_path))  # decompression starts now, overlapping the heavy imports below
    try:
        from mcp_server.traces.analyze import analyze

        return analyze(req, progress, reader)
    finally:
        reader.close()
