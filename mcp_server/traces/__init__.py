"""Trace analyzer: Kineto trace loading, kernel attribution, module tree, CUDA-graph decode.

``analyze_trace`` is the engine behind the ``analyze_trace`` MCP tool and the
``kernelscope analyze`` verb.
"""
from __future__ import annotations

from mcp_server.traces.models import KERNEL_COLUMNS, TraceAnalysis

__all__ = ["analyze_trace", "TraceAnalysis", "KERNEL_COLUMNS"]


def __getattr__(name: str):
    if name == "analyze_trace":
        from mcp_server.traces.analyze import analyze_trace

        return analyze_trace
    raise AttributeError(name)
