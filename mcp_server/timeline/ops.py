"""Operations of the timeline engine, declared once (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from mcp_server.core.operation import WRITES_FILES, Operation
from mcp_server.timeline.models import TimelineAnalysis, TimelineComparison
from mcp_server.timeline.requests import AnalyzeTimelineRequest, CompareTimelinesRequest

#: the short CLI flags both operations take
_ALIASES = {"event_names": ("--events",), "overhead_path": ("--overhead",), "perfetto_path": ("--perfetto",),
            "png_path": ("--png",)}

OPERATIONS = [
    Operation(
        tool="analyze_timeline", verb="timeline analyze", title="Analyze an in-kernel probe timeline",
        help="decode one probe buffer: phases, imbalance, critical path",
        description=(
            "Decode a probe buffer (FlashInfer profiler / kernelscope probe format, .bin or .npy) of a persistent or "
            "multi-phase kernel: per phase and occurrence the wall, slowest and mean block time, imbalance, start "
            "skew, last-finishing block, barrier waits, the critical path and ranked verdicts. Optionally writes "
            "Perfetto JSON and a Gantt PNG."),
        request=AnalyzeTimelineRequest, result=TimelineAnalysis,
        engine="mcp_server.timeline.analysis:analyze_timeline", render="mcp_server.timeline.render:render_analysis",
        hints=WRITES_FILES, positional=("buffer_path",),
        aliases=_ALIASES,
        progress=True, outputs={"perfetto_path": "json", "png_path": "png"},
    ),
    Operation(
        tool="compare_timelines", verb="timeline compare", title="Compare two probe timelines (before/after)",
        help="compare two probe buffers of the same kernel (before/after)",
        description=(
            "Analyze two probe buffers of the same kernel and compare every phase before and after: wall, slowest, "
            "mean, imbalance, skew, barrier waits and critical-path time, so cost moving between phases is visible."),
        request=CompareTimelinesRequest, result=TimelineComparison,
        engine="mcp_server.timeline.compare:compare_timelines", render="mcp_server.timeline.render:render_comparison",
        hints=WRITES_FILES, positional=("before_path", "after_path"),
        aliases={**_ALIASES, "after_overhead_path": ("--after-overhead",)},
        progress=True, outputs={"perfetto_path": "json", "png_path": "png"},
    ),
]
