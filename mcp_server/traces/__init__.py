"""Trace analyzer: Kineto trace loading, kernel attribution, module tree, CUDA-graph decode.

``analyze_trace`` (``entry.py``) is the entry for Python callers (the trace-set ranks, compare's
trace sides, tests): it starts reading the trace before the heavy imports. The faces call
``mcp_server.traces.analyze.analyze_trace`` (the same request, the same analysis).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_server.core.lazy import lazy_names

if TYPE_CHECKING:
    from mcp_server.traces.entry import analyze_trace
    from mcp_server.traces.models import KERNEL_COLUMNS, TraceAnalysis

__all__ = ["analyze_trace", "TraceAnalysis", "KERNEL_COLUMNS"]
# loaded on first use, so importing the package stays cheap: the split decode's helper process imports it and
# only the loader's modules (``split_child``)
__getattr__ = lazy_names(__name__, {"analyze_trace": "entry", "TraceAnalysis": "models", "KERNEL_COLUMNS": "models"},
                         globals())
