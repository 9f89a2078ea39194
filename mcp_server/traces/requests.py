"""Request models of the traces operations (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from mcp_server.core.argbounds import PATH_CHARS
from mcp_server.core.operation import SizedRequest, WritesOutputs

CATEGORIES_HELP = "Categories CSV (category,pattern); default: the shared kernel_categories.csv"


class AnalyzeTraceRequest(SizedRequest, WritesOutputs):
    trace_path: str = Field(max_length=PATH_CHARS, description="Path to a Kineto trace (.json or .json.gz)")
    output_xlsx: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "Write the xlsx report (upstream layout + full kernel table) here"))
    categories: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=CATEGORIES_HELP)
    reference_trace: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "Trace to attribute CUDA-graph replays to modules from: an eager step of the same model, or the trace "
        "profiled while the graph was captured (SGLang/vLLM capture traces)"))
