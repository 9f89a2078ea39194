"""Request models of the traces operations (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from mcp_server.core.argbounds import CATEGORIES_HELP, PathArg
from mcp_server.core.operation import SizedRequest, WritesOutputs


class AnalyzeTraceRequest(SizedRequest, WritesOutputs):
    trace_path: PathArg = Field(description="Path to a Kineto trace (.json or .json.gz)")
    output_xlsx: Optional[PathArg] = Field(default=None, description=(
        "Write the xlsx report (upstream layout + full kernel table) here"))
    categories: Optional[PathArg] = Field(default=None, description=CATEGORIES_HELP)
    reference_trace: Optional[PathArg] = Field(default=None, description=(
        "Trace to attribute CUDA-graph replays to modules from: an eager step of the same model, or the trace "
        "profiled while the graph was captured (SGLang/vLLM capture traces)"))
