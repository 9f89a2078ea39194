"""Timeline engine: decode in-kernel probe buffers (FlashInfer-compatible format), find the
phase and block that set a persistent / multi-phase kernel's critical path, compare before and
after, export Perfetto JSON and a Gantt PNG. Probe writers: ``include/kernelscope_probe.cuh``
(CUDA) and :mod:`mcp_server.timeline.triton_probe` (Triton).

Public functions are imported lazily so ``import mcp_server.timeline`` stays cheap and needs
neither pandas nor Triton.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mcp_server.core.lazy import lazy_names

if TYPE_CHECKING:
    from mcp_server.timeline.analysis import analyze_path, analyze_timeline
    from mcp_server.timeline.compare import compare_analyses, compare_timelines
    from mcp_server.timeline.decode import decode_buffer

INCLUDE_DIR = Path(__file__).resolve().parent / "include"

__all__ = ["analyze_timeline", "compare_timelines", "analyze_path", "compare_analyses", "decode_buffer", "INCLUDE_DIR"]
__getattr__ = lazy_names(__name__, {"analyze_timeline": "analysis", "compare_timelines": "compare",
                                    "analyze_path": "analysis", "compare_analyses": "compare",
                                    "decode_buffer": "decode"}, globals())
