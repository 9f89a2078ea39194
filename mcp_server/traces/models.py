"""Result models of the trace analyzer (pydantic only; cheap to import).

The per-kernel table is not part of the JSON result (it can hold millions of
rows): it travels as a pandas DataFrame on ``TraceAnalysis.kernels`` with the
columns listed in ``KERNEL_COLUMNS``.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, PrivateAttr

from mcp_server.models import Model, Warning_

#: Columns of the per-kernel DataFrame (one row per GPU kernel / memcpy / memset).
KERNEL_COLUMNS: dict[str, str] = {
    "name": "kernel name as in the trace",
    "category": "category from the categories CSV",
    "kind": "kernel | memcpy | memset",
    "ts_us": "start timestamp (us, trace clock)",
    "dur_us": "duration (us)",
    "device": "GPU index",
    "stream": "stream id",
    "correlation": "correlation id linking to the launch",
    "module": "owning (deepest) module instance, e.g. Linear_3; '' when unattributed",
    "module_type": "module type (instance name without numeric suffix), e.g. Linear",
    "module_path": "slash-joined instance path from the root module, e.g. LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0/Linear_0",
    "root_type": "type of the outermost module of the path ('' when unattributed)",
    "phase": "prefill | decode | '' (unknown)",
    "cpu_op": "innermost aten/cpu op enclosing the launch ('' when none)",
    "input_dims": "Input Dims of that cpu op, as text ('' when not recorded)",
    "source": "innermost non-torch Python frame enclosing the launch, e.g. modeling_llama.py(123): forward",
    "graph": "True when launched by a CUDA/HIP graph replay",
    "confidence": "attribution confidence 0..1 (1 for direct attribution; majority share for graph replays; 0 when unattributed)",
    "layer": "index of the layer occurrence within its phase for graph replays (-1 when not cut)",
}

Phase = Literal["prefill", "decode", ""]


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
    categories_source: str = ""
    categories_sha256: str = ""
    output_xlsx: Optional[str] = None
    warnings: list[Warning_] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict, description="trace metadata (device properties, versions)")

    _kernels: Any = PrivateAttr(default=None)

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
