"""Trace analyzer: Kineto trace loading, kernel attribution, module tree, CUDA-graph decode.

``analyze_trace`` is the engine behind the ``analyze_trace`` MCP tool and the
``kernelscope analyze`` verb.
"""
from __future__ import annotations

import os
from typing import Optional

from mcp_server.core.vocab import ProgressFn
from mcp_server.traces.models import KERNEL_COLUMNS, TraceAnalysis

__all__ = ["analyze_trace", "TraceAnalysis", "KERNEL_COLUMNS"]


def analyze_trace(
    trace_path: str | os.PathLike,
    *,
    output_xlsx: str | os.PathLike | None = None,
    categories: str | os.PathLike | None = None,
    reference_trace: str | os.PathLike | None = None,
    progress: Optional[ProgressFn] = None,
) -> TraceAnalysis:
    """Attribute every GPU kernel of a Kineto trace (.json/.json.gz) to its nn.Module, category and phase.

    Returns a ``TraceAnalysis`` with the per-kernel DataFrame on ``.kernels``
    (columns ``KERNEL_COLUMNS``). ``progress(done, total, message)`` is called at
    stage boundaries. Raises ``FileMissingError`` / ``TraceFormatError`` naming the file.
    """
    from mcp_server.traces._reader import blocks, check_path

    p = check_path(trace_path)
    reader = blocks(p)  # decompression starts now, overlapping the heavy imports below
    try:
        from mcp_server.traces.analyze import analyze_trace as _engine

        return _engine(p, output_xlsx=output_xlsx, categories=categories, reference_trace=reference_trace,
                       progress=progress, blocks=reader)
    finally:
        reader.close()
