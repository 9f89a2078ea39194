"""Result models of the repro engine."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from mcp_server.core.models import Model, Warning_


class ReproArg(Model):
    """One argument of a recorded op, as rebuilt (or why it could not be)."""

    kind: Literal["tensor", "scalar", "list", "none", "string", "unsupported"]
    dtype: Optional[str] = Field(default=None, description="torch dtype name of a tensor, e.g. bfloat16")
    shape: Optional[list[int]] = None
    stride: Optional[list[int]] = None
    value: Any = Field(default=None, description="scalar / list / string value as recorded")
    recorded_type: str = Field(default="", description="the trace's 'Input type' text")


class KernelTime(Model):
    name: str
    count: int
    total_us: float
    mean_us: float


class ReproOp(Model):
    """One op signature (name + arguments), aggregated over its calls in the selected scope."""

    id: str = Field(description="op0, op1, ... in order of total kernel time")
    name: str = Field(description="the op's name in the trace, e.g. aten::mm")
    calls: int
    kernel_us: float = Field(description="total GPU time of the kernels its calls launched")
    per_call_us: float = Field(description="kernel time per call")
    share_pct: float = Field(description="share of the selected kernels' time")
    module_path: str = Field(default="", description="module path of its first call ('' when unattributed)")
    module_type: str = ""
    kernels: list[KernelTime] = Field(default_factory=list)
    args: list[ReproArg] = Field(default_factory=list)
    rebuilt: bool
    reason: str = Field(default="", description="why it was not rebuilt (empty when rebuilt)")
    library: str = Field(default="", description=(
        "namespace of a custom op (aiter, sgl_kernel, vllm, ...): its replay needs that library installed"))
    function: str = Field(default="", description="function name in repro.py ('' when not rebuilt)")
    spec: str = Field(default="", description="validate_candidate spec file for it ('' when none)")


class MakeReproResult(Model):
    trace: str
    output_dir: str
    files: list[str] = Field(default_factory=list)
    scope: str = Field(description="which kernels were selected (module, kernel regex, op, or all)")
    selected_kernel_us: float = Field(description="GPU time of the selected kernels")
    rebuilt_kernel_us: float = Field(description="of which the rebuilt ops launched")
    coverage_pct: float = Field(description="rebuilt / selected kernel time, percent (custom ops included)")
    torch_only_pct: float = Field(description="the part whose replay needs torch alone (no custom-op library)")
    ops: list[ReproOp] = Field(default_factory=list, description="rebuilt ops, slowest first")
    not_rebuilt: list[ReproOp] = Field(default_factory=list, description="ops that could not be rebuilt, with why")
    spec: str = Field(default="", description="spec.toml: the validate_candidate spec of the slowest rebuilt op")
    warnings: list[Warning_] = Field(default_factory=list)


class ReplayTiming(Model):
    id: str
    name: str
    trace_us: float = Field(description="kernel time per call in the trace")
    replay_kernel_us: Optional[float] = Field(default=None, description=(
        "kernel time per call in the replay (profiler device time, warm), median"))
    replay_warm_us: Optional[float] = Field(default=None, description="CUDA-event wall time per call, warm, median")
    replay_cold_us: Optional[float] = Field(default=None, description=(
        "CUDA-event wall time per call with the L2 flushed before each call, median"))
    replay_kernel_cold_us: Optional[float] = Field(default=None, description=(
        "kernel time per call in the replay with the L2 flushed before each call (profiler device time)"))
    ratio: Optional[float] = Field(default=None, description="replay kernel time (warm) / trace kernel time")
    ratio_cold: Optional[float] = Field(default=None, description="replay kernel time (cold) / trace kernel time")
    within_band: Optional[bool] = Field(default=None, description=(
        "the warm or the cold replay kernel time within [0.8, 1.25] of the trace's (the trace's cache state is "
        "not recorded; band names which)"))
    band: str = Field(default="", description="warm, cold or '' (neither): which replay matched the trace")
    kernels: list[str] = Field(default_factory=list, description="kernels the replay launched")
    error: str = ""


class RunReproResult(Model):
    output_dir: str
    device: str
    ops: list[ReplayTiming] = Field(default_factory=list)
    replayed_trace_us: float = Field(description="trace kernel time of the ops replayed (per call x calls)")
    within_band_pct: float = Field(description="share of that time whose replay is within 20 % of the trace")
    warnings: list[Warning_] = Field(default_factory=list)
