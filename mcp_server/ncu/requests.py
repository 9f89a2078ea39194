"""Request models of the ncu operations (run_ncu, parse_ncu, classify_bottleneck, select_candidate).

Bounds (core/argbounds.py): the target's argv items, ``kernel_name`` and ``kernel_id`` take the path bound (a
mangled kernel name can run to thousands of characters), ``metrics`` items too (each may be a comma-joined
list of metric names); sections, NVTX ranges and the GPU name take the name bound."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from mcp_server.core.argbounds import NameArg, NameList, PathArg, PathList
from mcp_server.core.operation import Request, SizedRequest, WritesOutputs, top_n_field

PATH_HELP = ("An Nsight Compute report (.ncu-rep, also .ncu-rep.xz/.gz) or an ncu CSV "
             "(raw or details page, or --csv stdout)")
GPU_HELP = ("GPU of the spec table (h200, h100, a100, b200, l40s, mi300x, mi355x) or a device name; "
            "default: the device the report records")
CACHE_HELP = ("Cache control the profile was collected with, when neither the sidecar nor the report says: "
              "'none' (warm: L2 residency can be judged) or 'all' (ncu's default: caches flushed)")


class RunNcuRequest(Request):
    target: PathList = Field(min_length=1, description=(
        "The command to profile as an argument list (e.g. ['python', 'bench.py', '--n', '4']); never a shell string. "
        "Or one make_repro directory (['out/attn']): its op `repro_op` is replayed and profiled alone"))
    repro_op: Optional[str] = Field(default=None, max_length=16, pattern=r"^op[0-9]+$", description=(
        "With a make_repro directory as the target: the op to profile (default op0, the slowest). The target "
        "becomes [python, DIR/repro.py, --only OP, --cache cold, --iters 5, --nvtx] and the kernel filter its NVTX "
        "range (nvtx_include OP/): exactly the op's kernels, 8 calls (3 warm-up, 5 timed)"))
    report: PathArg = Field(default="kernelscope_ncu", description=(
        "Report path (.ncu-rep added when missing); the log, sidecar JSON and application output go beside it"))
    timeout_s: float = Field(default=600.0, gt=0, description=(
        "Time limit for the whole ncu run in seconds; on expiry the process group is killed and nothing is parsed"))
    ncu: Optional[PathArg] = Field(default=None, description=(
        "ncu executable (default: $NCU, PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute/*)"))
    metric_set: Literal["classify", "minimal", "none"] = Field(default="classify", description=(
        "Named metric set: 'classify' (the sections and metrics the classifier reads), 'minimal' (speed of light, "
        "time, launch), 'none' (only what set_name/sections/metrics ask for)"))
    set_name: Optional[NameArg] = Field(default=None, description="An ncu section set (--set), e.g. 'full'")
    sections: Optional[NameList] = Field(default=None, description=(
        "Extra ncu sections (--section), e.g. SourceCounters"))
    metrics: Optional[PathList] = Field(default=None, description="Extra ncu metric names (--metrics)")
    kernel_name: Optional[PathArg] = Field(default=None, description=(
        "Profile only kernels of this name: exact, or 'regex:PATTERN' (ncu --kernel-name)"))
    kernel_id: Optional[PathArg] = Field(default=None, description="ncu --kernel-id context:stream:name:invocation")
    launch_skip: Optional[int] = Field(default=None, ge=0, description="Skip this many matching launches first")
    launch_count: Optional[int] = Field(default=None, ge=1, description="Profile at most this many matching launches")
    nvtx_include: Optional[NameList] = Field(default=None, description="NVTX ranges to include (ncu --nvtx-include)")
    nvtx_exclude: Optional[NameList] = Field(default=None, description="NVTX ranges to exclude (ncu --nvtx-exclude)")
    cache_control: Literal["all", "none"] = Field(default="all", description=(
        "'all' flushes caches before every replay pass (cold, ncu's default); 'none' keeps them (warm): needed to "
        "judge whether weights stay L2-resident between launches"))
    clock_control: Literal["none", "base"] = Field(default="none", description=(
        "'none' leaves GPU clocks as the real run has them (default); 'base' locks base clocks"))
    profile_from_start: bool = Field(default=True, description=(
        "Profile from the start; false waits for cudaProfilerStart (--profile-from-start off)"))
    target_processes: Literal["all", "application-only"] = Field(default="all", description=(
        "Profile child processes too ('all') or only the launched process"))
    replay_mode: Optional[Literal["kernel", "application", "range", "app-range"]] = Field(
        default=None, description="ncu --replay-mode (default kernel)")
    overwrite: bool = Field(default=False, description="Replace an existing report")
    cwd: Optional[PathArg] = Field(default=None, description="Working directory of the target")
    parse: bool = Field(default=True, description="Parse the report into per-kernel profiles when done")


class ParseNcuRequest(SizedRequest):
    top_n: int = top_n_field(5, "Kernels kept in the answer (most total time first)")
    path: PathArg = Field(description=PATH_HELP)
    cache_control: Optional[Literal["all", "none"]] = Field(default=None, description=CACHE_HELP)
    gpu: Optional[NameArg] = Field(default=None, description=GPU_HELP)


class ClassifyRequest(SizedRequest):
    top_n: int = top_n_field(3, "Kernels kept in the answer (most total time first; each carries its ~50 metrics)")
    path: PathArg = Field(description=PATH_HELP)
    gpu: Optional[NameArg] = Field(default=None, description=GPU_HELP)
    cache_control: Optional[Literal["all", "none"]] = Field(default=None, description=CACHE_HELP)


class SelectRequest(SizedRequest, WritesOutputs):
    path: PathArg = Field(description=PATH_HELP)
    gpu: Optional[NameArg] = Field(default=None, description=GPU_HELP)
    cache_control: Optional[Literal["all", "none"]] = Field(default=None, description=CACHE_HELP)
    min_share: float = Field(default=0.05, ge=0, lt=1, description=(
        "Skip kernels under this share of the profile's kernel time (0..1)"))
    md_path: Optional[PathArg] = Field(default=None, description="Write the Markdown report here")
    png_path: Optional[PathArg] = Field(default=None, description="Write the roofline PNG here")
