"""Result models of the trace analyzer (pydantic only; cheap to import).

The per-kernel table is not part of the JSON result (it can hold millions of
rows): it travels as a pandas DataFrame on ``TraceAnalysis.kernels`` with the
columns listed in ``KERNEL_COLUMNS``.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, PrivateAttr

from mcp_server.core.models import Model, Warning_
from mcp_server.core.vocab import KERNEL_COLUMNS  # noqa: F401  (the per-kernel schema, re-exported)

Phase = Literal["prefill", "decode", "graph", ""]


class CategoryTotal(Model):
    category: str
    count: int
    total_us: float
    pct: float = Field(description="share of total kernel time, percent")


class ModuleTypeStats(Model):
    """Per module type statistics over its instances' calls (upstream 'Overview' sheet)."""

    type: str
    depth: int = Field(description="depth of the shallowest occurrence (root = 0)")
    count: int = Field(description="number of calls (module spans / graph-replay groups) of this type")
    total_us: float = Field(description="kernel time attributed to this type's calls, children included")
    mean_us: float
    std_us: float
    min_us: float
    max_us: float
    pct_of_parent: float
    top_kernel: str = ""


class ModuleNode(Model):
    """One node of the module tree (merged by instance path)."""

    path: str
    name: str = Field(description="instance name, e.g. LlamaAttention_0")
    type: str
    depth: int
    phase: str = ""
    total_us: float = Field(description="kernel time of this node and its descendants")
    self_us: float = Field(description="kernel time attributed directly to this node")
    kernel_count: int
    breakdown: dict[str, float] = Field(default_factory=dict, description="category -> us, descendants included")


class PhaseTotal(Model):
    phase: str
    kernel_count: int
    total_us: float


class GraphAttribution(Model):
    """How CUDA-graph replay kernels were attributed."""

    graph_kernel_count: int = 0
    attributed_count: int = 0
    method: Literal["none", "same-trace", "reference-trace", "unattributed"] = "none"
    mean_confidence: float = 0.0
    layer_cut: Literal["communication", "period", "none"] = "none"
    layers_found: int = 0
    notes: list[str] = Field(default_factory=list)


class TimeBreakdown(Model):
    """GPU time of one scope (the trace, a device, a stream) over its window (see ``GpuBreakdown``)."""

    scope: Literal["trace", "device", "stream"]
    device: Optional[int] = None
    stream: Optional[int] = None
    kernel_count: int = Field(description="GPU events (kernels, memcpy, memset) measured")
    window_start_us: float = Field(description="start of the window (trace clock, us)")
    window_us: float = Field(description="window length: end of the last GPU event - start of the first")
    busy_us: float = Field(description="time any GPU event runs (union of intervals)")
    idle_us: float = Field(description="window - busy")
    computation_us: float = Field(description="time any computation kernel runs (not communication, memcpy, memset)")
    communication_us: float = Field(description="time any communication kernel runs (category 'communication')")
    memory_us: float = Field(description="time any memcpy or memset runs")
    exposed_communication_us: float = Field(description="communication time not overlapped by computation")
    exposed_memory_us: float = Field(description="memcpy/memset time overlapped by neither computation nor "
                                                 "communication")
    busy_pct: float = Field(description="busy / window, percent")
    comm_overlap_pct: Optional[float] = Field(default=None, description=(
        "share of communication time overlapped by computation, percent (HTA's comp_comm_overlap; null without "
        "communication)"))


class GpuBreakdown(Model):
    """Busy / idle / computation / communication / memory / exposed communication, as TraceLens's gpu_timeline
    and HTA's temporal breakdown define them (times are unions of intervals; computation + exposed
    communication + exposed memory + idle = window)."""

    window: Literal["all GPU events", "launched GPU events"] = Field(description=(
        "which GPU events were measured: all of them, or those whose launch is in the trace (when some ran "
        "before the profiler recorded the CPU side)"))
    window_note: str = ""
    excluded_count: int = Field(default=0, description="GPU events outside the measured set")
    excluded_us: float = 0.0
    total: TimeBreakdown
    devices: list[TimeBreakdown] = Field(default_factory=list, description="per device (when several), busiest "
                                                                           "first")
    streams: list[TimeBreakdown] = Field(default_factory=list, description="per (device, stream) over the "
                                                                           "device's window, busiest first")


class TraceAnalysis(Model):
    trace: str
    device: Optional[str] = None
    platform: Literal["nvidia", "amd", "unknown"] = "unknown"
    total_kernel_us: float
    kernel_count: int
    attributed_count: int
    unattributed_count: int
    unattributed_us: float
    phases: list[PhaseTotal] = Field(default_factory=list)
    categories: list[CategoryTotal] = Field(default_factory=list)
    modules: list[ModuleTypeStats] = Field(default_factory=list)
    tree: list[ModuleNode] = Field(default_factory=list)
    graph: GraphAttribution = Field(default_factory=GraphAttribution)
    breakdown: Optional[GpuBreakdown] = Field(default=None, description=(
        "GPU time breakdown (busy, idle, computation, communication, memory, exposed communication) for the trace, "
        "each device and stream; null without GPU events"))
    categories_source: str = ""
    categories_sha256: str = ""
    output_xlsx: Optional[str] = None
    warnings: list[Warning_] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict, description="trace metadata (device properties, versions)")

    _kernels: Any = PrivateAttr(default=None)
    _raw: Any = PrivateAttr(default=None)

    @property
    def raw(self) -> Any:
        """The loaded trace's columns (``traces.loader.RawTrace``) when the analyzer attached them, else None
        (the trace-set engine reads collectives and module spans from them without a second read)."""
        return self._raw

    @property
    def kernels(self):
        """The per-kernel pandas DataFrame (columns: ``KERNEL_COLUMNS``).

        The analyzer may attach a zero-argument builder instead of a frame; it runs
        on first access (so a summary-only run never imports pandas).
        """
        if callable(self._kernels):
            self._kernels = self._kernels()
        return self._kernels

    def with_kernels(self, df) -> "TraceAnalysis":
        """Attach the per-kernel DataFrame, or a zero-argument callable that builds it."""
        self._kernels = df
        return self
