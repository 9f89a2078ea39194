"""Request models of the trace-set operations (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from mcp_server.core.argbounds import CATEGORIES_HELP, NameList, PathArg, PathList
from mcp_server.core.operation import Request, SizedRequest, WritesOutputs

EXECUTOR_HELP = ("Where each rank is analysed: process (a local pool of worker processes), ray (one Ray task per "
                 "trace; needs kernelscope[ray]) or inline (this process, one after another)")
WORKERS_HELP = ("Parallel workers (default: the CPUs this process may use, at most one per trace); more than those "
                "CPUs (or 4 on a smaller machine) is refused; the inline executor and a remote Ray cluster start no "
                "local workers")
MEMORY_HELP = "Address-space limit per worker process, e.g. 4G; 0 for none (default: KERNELSCOPE_WORKER_MEMORY or 8G)"
RAY_HELP = ("Ray cluster to run on (ray://HOST:10001, HOST:6379 or auto); default: a local Ray instance started "
            "and stopped for this call")
THRESHOLD_HELP = "A layer counts as imbalanced when its slowest rank takes at least this times the mean over ranks"


class _SetOptions(SizedRequest):
    categories: Optional[PathArg] = Field(default=None, description=CATEGORIES_HELP)
    executor: Literal["process", "ray", "inline"] = Field(default="process", description=EXECUTOR_HELP)
    workers: Optional[int] = Field(default=None, ge=1, le=1024, description=WORKERS_HELP)
    worker_memory: Optional[str] = Field(default=None, max_length=16, description=MEMORY_HELP)
    ray_address: Optional[PathArg] = Field(default=None, description=RAY_HELP)
    imbalance_threshold: float = Field(default=1.05, ge=1.0, le=10.0, description=THRESHOLD_HELP)


# The traces come first among a request's fields (the engines' positional arguments: ``analyze_trace_set(paths)``,
# ``compare_trace_sets(a, b)``), so they are declared in a base class after ``_SetOptions``: pydantic orders the
# fields of the last base first.
class _OneRun(Request):
    paths: PathList = Field(min_length=1, description=(
        "The run's per-rank traces: files, directories (their *.json, *.json.gz, *.json.zst) or glob patterns"))


class _TwoRuns(Request):
    a: PathArg = Field(description="Run A: a directory of per-rank traces or a glob pattern")
    b: PathArg = Field(description="Run B: a directory of per-rank traces or a glob pattern")


class AnalyzeTraceSetRequest(_SetOptions, _OneRun, WritesOutputs):
    reference_trace: Optional[PathArg] = Field(default=None, description=(
        "Trace to attribute CUDA-graph replays to modules from (every rank): an eager step of the same model, "
        "or the trace profiled while the graph was captured"))
    output_xlsx: Optional[PathArg] = Field(default=None, description=(
        "Write the summary workbook here (Ranks, Straggler, Layers, Modules, Categories) and each rank's own "
        "report beside it as <stem>.rank<N>.xlsx"))
    output_html: Optional[PathArg] = Field(default=None, description=(
        "Write a self-contained HTML page with the rank x module heat map here"))


class CompareTraceSetsRequest(_SetOptions, _TwoRuns):
    labels: Optional[NameList] = Field(default=None, min_length=2, max_length=2, description=(
        "Two labels for A and B (default: the directory names)"))
