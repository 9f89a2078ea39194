"""Result models of the ncu engine (the JSON contract of run_ncu, parse_ncu, classify, select).

Field names of ``source``, ``kernels[*]`` (``id``, ``name``, ``short_name``,
``launches``, ``duration_ns``, ``metrics``, ``bottleneck``) and of
``bottleneck`` (``class``, ``limiter``, ``l2_resident``, ``confidence``,
``evidence``, ``advice``) are fixed: agents and scripts rely on them.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import ConfigDict, Field

from mcp_server.core.models import Model, Warning_

SourceFormat = Literal["ncu-rep", "csv-raw", "csv-details"]
CacheControl = Literal["all", "none"]
BottleneckClass = Literal["compute_bound", "memory_bound", "latency_bound", "balanced", "unknown"]


#: metric names a report holds that the catalogue does not map
Unrecognized = Annotated[list[str], Field(default_factory=list, description=(
    "metric names (or 'Section: label' of a details page) the report holds that the catalogue does not map: "
    "shown, not used by the classifier (device attributes, profiler settings and topology are left out)"))]


class Source(Model):
    path: str
    format: SourceFormat
    ncu_version: Optional[str] = None
    cache_control: Optional[CacheControl] = None
    cache_control_from: Optional[str] = Field(default=None, description=(
        "where cache_control came from: 'argument', 'sidecar', 'report' (ncu's notes in a --csv capture), "
        "'log' (the REPORT.log beside it) or null when unknown"))
    clock_control: Optional[str] = None
    device: Optional[str] = None
    sidecar: Optional[str] = None


class DurationStats(Model):
    total: float
    mean: float
    median: float
    min: float
    max: float


class LaunchRow(Model):
    """One profiled launch as ncu recorded it."""

    id: int
    duration_ns: Optional[float] = None
    nvtx: Optional[str] = None
    metrics: dict[str, Optional[float]] = Field(default_factory=dict, description=(
        "the headline metrics of this launch (speed of light, DRAM, L2 hit rate); null: n/a"))


class KernelProfile(Model):
    id: int = Field(description="index of the kernel (launch group) in this profile, 0-based")
    name: str
    short_name: str
    launches: int
    duration_ns: DurationStats
    grid: Optional[str] = None
    block: Optional[str] = None
    nvtx: Optional[str] = None
    registers_per_thread: Optional[float] = None
    shared_mem_bytes: Optional[float] = None
    waves_per_sm: Optional[float] = None
    occupancy_limiter: Optional[str] = Field(default=None, description=(
        "registers | shared_mem | blocks | warps: the launch limit that sets theoretical occupancy"))
    top_stalls: list[tuple[str, float]] = Field(default_factory=list, description=(
        "largest warp-stall reasons, cycles per issued instruction"))
    flops: Optional[float] = Field(default=None, description=(
        "executed FLOPs per launch, when collected: FP32 (2 x FFMA + FADD + FMUL) plus the tensor path's bf16 "
        "ops as ncu counts them (padded tile rows included: work done, not useful work)"))
    dram_bytes: Optional[float] = Field(default=None, description=(
        "DRAM bytes read + written per launch, when collected"))
    arithmetic_intensity: Optional[float] = Field(default=None, description="flops / dram_bytes (FLOP/byte)")
    metrics: dict[str, float] = Field(default_factory=dict, description=(
        "canonical name -> mean over launches (rates weighted by duration); a metric absent or n/a in every "
        "launch is left out and named in `missing`"))
    missing: list[str] = Field(default_factory=list, description="catalogue metrics absent or n/a (never 0)")
    launch_rows: list[LaunchRow] = Field(default_factory=list)


class Evidence(Model):
    metric: str
    value: Optional[float]
    threshold: Optional[float] = None
    reads: str


class Bottleneck(Model):
    # "class" is a Python keyword: the field is class_ in code and "class" in JSON (dump and schema).
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    class_: BottleneckClass = Field(alias="class", serialization_alias="class")
    limiter: Optional[str] = None
    l2_resident: Optional[bool] = None
    confidence: float = Field(ge=0, le=1)
    evidence: list[Evidence] = Field(default_factory=list)
    advice: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list, description="metrics the verdict needed but did not have")


class RooflinePoint(Model):
    """Where a kernel sits against the GPU's roofs (needs FLOP and DRAM-byte counters)."""

    arithmetic_intensity: float = Field(description="executed FLOPs / DRAM bytes")
    flops_per_s: float = Field(description="executed FLOPs / mean duration")
    roof_flops_per_s: float = Field(description="min(peak, intensity x memory bandwidth) at this intensity")
    fraction_of_roof: float
    peak: str = Field(description="the compute roof used: bf16_tflops (tensor work) or fp32_tflops")
    memory_bound_side: bool = Field(description="true when the intensity is left of the ridge point")
    sources: dict[str, str] = Field(default_factory=dict, description="measured/datasheet per ceiling used")


class ClassifiedKernel(KernelProfile):
    bottleneck: Bottleneck
    roofline: Optional[RooflinePoint] = None
    time_share: float = Field(default=0.0, description="share of the profile's total kernel time, 0..1")


class SpecValue(Model):
    value: float
    source: Literal["measured", "datasheet"]


class NcuProfile(Model):
    """What ``parse_ncu`` answers: per-kernel profiles, no verdicts."""

    source: Source
    gpu: Optional[str] = None
    total_duration_ns: float
    kernels: list[KernelProfile]
    unrecognized_metrics: Unrecognized
    warnings: list[Warning_] = Field(default_factory=list)


class Classification(Model):
    """What ``classify_bottleneck`` answers."""

    source: Source
    gpu: Optional[str] = None
    gpu_spec: Optional[dict[str, SpecValue]] = Field(default=None, description=(
        "the ceilings used from gpu_specs.toml (hbm_tb_s, bf16_tflops, fp32_tflops, l2_mb, sm_count), each with "
        "its source: a measured value overrides the datasheet"))
    total_duration_ns: float
    kernels: list[ClassifiedKernel]
    unrecognized_metrics: Unrecognized
    warnings: list[Warning_] = Field(default_factory=list)


class Ranked(Model):
    id: int
    short_name: str
    nvtx: Optional[str] = None
    time_share: float
    headroom: float = Field(description="1 - (position against its roof), 0..1")
    score: float
    bottleneck_class: str
    limiter: Optional[str] = None
    why_not: Optional[str] = None


class Selection(Model):
    """What ``select_candidate`` answers."""

    source: Source
    gpu: Optional[str] = None
    candidate: Optional[ClassifiedKernel] = None
    fits: list[str] = Field(default_factory=list, description="kinds of change that fit the candidate's class")
    does_not_fit: list[str] = Field(default_factory=list, description="kinds of change that do not, with why")
    ranking: list[Ranked] = Field(default_factory=list)
    min_share: float
    md_path: Optional[str] = None
    png_path: Optional[str] = None
    warnings: list[Warning_] = Field(default_factory=list)


class NcuRun(Model):
    """What ``run_ncu`` answers: where the report is and what was profiled."""

    report: str
    log: str
    sidecar: str
    app_output: str = Field(description="the target's own stdout + stderr (kept out of the data)")
    argv: list[str]
    replay: Optional[str] = Field(default=None, description=(
        "with a make_repro directory as the target: 'DIR op3 (aten::_softmax)', the op replayed and profiled"))
    ncu: str
    ncu_version: Optional[str] = None
    cache_control: CacheControl
    clock_control: str
    gpu: Optional[str] = None
    kernels_profiled: int
    target_rc: Optional[int] = None
    wall_s: float
    profile: Optional[NcuProfile] = None
    warnings: list[Warning_] = Field(default_factory=list)
