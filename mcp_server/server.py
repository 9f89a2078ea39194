"""MCP server: tool registrations only.

Each tool is a thin wrapper: it runs the engine function in a worker thread
(so the server keeps serving), bridges engine progress to
``ctx.report_progress``, and maps ``KernelscopeError`` to ``ToolError``. Nothing
here writes to stdout: on stdio that is the protocol channel.

Sections are grouped by engine; add a tool to its section.
"""
from __future__ import annotations

import logging
from typing import Annotated, Any, Callable, Literal, Optional, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from mcp_server import __version__
from mcp_server.errors import KernelscopeError, redact
# Result models (pydantic only, cheap to import): they are the tools' output schemas.
from mcp_server.traces.models import TraceAnalysis
from mcp_server.compare.models import BudgetResult, DiffResult
from mcp_server.compare.recategorize import RecategorizeResult
from mcp_server.refs.models import ReferenceResult
from mcp_server.timeline.models import TimelineAnalysis, TimelineComparison

log = logging.getLogger("kernelscope.server")

mcp = MCPServer(
    "kernelscope",
    version=__version__,
    instructions=(
        "GPU kernel performance tools for LLM inference: analyze and compare PyTorch-profiler "
        "traces module by module, decode in-kernel probe timelines, profile with Nsight Compute. "
        "Paths are local file paths on the server's machine."
    ),
)

T = TypeVar("T")

READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
WRITES_FILES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)
OPEN_WORLD_READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=True)


async def run_engine(ctx: Context | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a synchronous engine call off the event loop.

    If ``fn`` accepts ``progress=``, the caller passes ``progress=True`` in kwargs and
    it is replaced by a callback ``(done, total, message)`` forwarded to the client.
    Any ``KernelscopeError`` becomes a ``ToolError`` with the same (redacted) text;
    any other exception becomes a ``ToolError`` naming its type, never a traceback.
    """
    if kwargs.get("progress") is True:
        if ctx is not None:
            def _progress(done: float, total: float | None = None, message: str | None = None) -> None:
                try:
                    anyio.from_thread.run(ctx.report_progress, done, total, message)
                except Exception:  # progress is best effort: never fail the work for it
                    pass

            kwargs["progress"] = _progress
        else:
            kwargs["progress"] = None
    try:
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))
    except KernelscopeError as exc:
        raise ToolError(str(exc)) from None
    except ToolError:
        raise
    except Exception as exc:  # keep serving; report the failure without a traceback
        log.exception("internal error in %s", getattr(fn, "__name__", fn))
        raise ToolError(redact(f"internal error ({type(exc).__name__}): {exc}")) from None


# --------------------------------------------------------------------------- traces


@mcp.tool(
    name="analyze_trace",
    title="Analyze a PyTorch-profiler trace",
    description=(
        "Attribute every GPU kernel of a PyTorch-profiler (Kineto) trace (.json/.json.gz, NVIDIA or AMD, "
        "eager or CUDA-graph) to its nn.Module, category and phase; return module and category totals. "
        "Optionally write the report workbook (upstream trace_module_analyzer layout plus full kernel table)."
    ),
    annotations=WRITES_FILES,
)
async def analyze_trace(
    trace_path: Annotated[str, Field(description="Path to a Kineto trace (.json or .json.gz)")],
    output_xlsx: Annotated[Optional[str], Field(description="Write the xlsx report here")] = None,
    categories: Annotated[Optional[str], Field(description="Categories CSV (category,pattern); default _shared/kernel_categories.csv")] = None,
    reference_trace: Annotated[Optional[str], Field(description="Eager trace of the same model used to attribute CUDA-graph replays")] = None,
    ctx: Context = None,  # type: ignore[assignment]
) -> TraceAnalysis:
    from mcp_server.traces import analyze_trace as engine

    return await run_engine(
        ctx, engine, trace_path, output_xlsx=output_xlsx, categories=categories,
        reference_trace=reference_trace, progress=True,
    )


# --------------------------------------------------------------------------- compare


@mcp.tool(
    name="recategorize",
    title="Re-apply kernel categories to reports",
    description=(
        "Re-classify every kernel of xlsx reports (kernelscope's or trace_module_analyzer's) with the categories "
        "CSV: Category columns, detail-sheet and Summary category tables, Module Tree breakdowns. In place "
        "(atomic) or into output_dir; returns per file how many kernels changed and (kernel, old, new)."
    ),
    annotations=WRITES_FILES,
)
async def recategorize(
    paths: Annotated[list[str], Field(description="Report workbooks (.xlsx) to update")],
    categories: Annotated[Optional[str], Field(description="Categories CSV (category,pattern); default _shared/kernel_categories.csv")] = None,
    output_dir: Annotated[Optional[str], Field(description="Write updated copies here instead of editing in place")] = None,
    ctx: Context = None,  # type: ignore[assignment]
) -> RecategorizeResult:
    from mcp_server.compare.recategorize import recategorize as engine

    return await run_engine(ctx, engine, paths, categories=categories, output_dir=output_dir)


@mcp.tool(
    name="budget",
    title="Per-category time budget of two runs",
    description=(
        "Compare two runs (traces .json/.json.gz, kernelscope or upstream xlsx reports) per kernel category: "
        "each side's us and share, gap (b - a) and ratio, sorted by |gap|. Works on CUDA-graph decode traces; "
        "upstream reports use 'GPU Kernels' and say when it was truncated."
    ),
    annotations=READ_ONLY,
)
async def budget(
    a: Annotated[str, Field(description="Side A: trace (.json/.json.gz) or report (.xlsx)")],
    b: Annotated[str, Field(description="Side B: trace (.json/.json.gz) or report (.xlsx)")],
    labels: Annotated[Optional[list[str]], Field(description="Two labels for A and B (default: file names)")] = None,
    phase: Annotated[Optional[Literal["prefill", "decode"]], Field(description="Keep only this phase's kernels")] = None,
    ctx: Context = None,  # type: ignore[assignment]
) -> BudgetResult:
    from mcp_server.compare.budget import budget as engine

    return await run_engine(ctx, engine, a, b, labels=labels, phase=phase)


@mcp.tool(
    name="diff_modules",
    title="Module-by-module comparison of two runs",
    description=(
        "Group each run's kernels by module type into functional blocks (_shared/functional_blocks.csv), align "
        "the kernels of each block across the runs and annotate FUSION / IMPROVE / MISSING; blocks sorted by "
        "|gap| (b - a) with the largest marked for optimisation. Inputs: traces or xlsx reports."
    ),
    annotations=READ_ONLY,
)
async def diff_modules(
    a: Annotated[str, Field(description="Side A: trace (.json/.json.gz) or report (.xlsx)")],
    b: Annotated[str, Field(description="Side B: trace (.json/.json.gz) or report (.xlsx)")],
    labels: Annotated[Optional[list[str]], Field(description="Two labels for A and B (default: file names)")] = None,
    reference_a: Annotated[Optional[str], Field(description=(
        "Eager trace of A's model, to attribute A's CUDA-graph replays (decode) to modules"))] = None,
    reference_b: Annotated[Optional[str], Field(description=(
        "Eager trace of B's model, to attribute B's CUDA-graph replays (decode) to modules"))] = None,
    ctx: Context = None,  # type: ignore[assignment]
) -> DiffResult:
    from mcp_server.compare.diff import diff_modules as engine

    return await run_engine(ctx, engine, a, b, labels=labels, reference_a=reference_a, reference_b=reference_b)


# --------------------------------------------------------------------------- refs


@mcp.tool(
    name="find_references",
    title="Find prior art for a kernel/op",
    description=(
        "Has someone already done this? Search upstream PRs (ROCm/aiter, sgl-project/sglang via gh or the GitHub "
        "REST API), local git checkouts (AITER_ROOT, SGLANG_ROOT, detected) and Jira for a kernel or op keyword, "
        "concurrently within a time bound. Sources come from _shared/data-sources.md. Each section says how it "
        "was obtained (live:gh, live:rest, live:jira, local:git, url-only) and why when degraded; `outcomes` "
        "reads as upstream_pr -> cherry-pick, local_hit -> dispatch/wiring, jira_ticket -> coordinate, "
        "nothing_found -> new work, unknown -> inconclusive."
    ),
    annotations=OPEN_WORLD_READ,
)
async def find_references(
    keyword: Annotated[str, Field(description="Kernel or op keyword, e.g. moe_sorting, ck_gemm, fused_moe, rmsnorm, mla")],
    category: Annotated[Optional[str], Field(description="Kernel category (e.g. moe, gemm); hits mentioning it come first. Default: classified from the keyword")] = None,
    sources: Annotated[Optional[list[str]], Field(description="Registry keys to search (default: every enabled source in _shared/data-sources.md)")] = None,
    max_results: Annotated[int, Field(ge=1, le=100, description="Hits per source")] = 10,
    days: Annotated[Optional[int], Field(ge=1, description="Only work updated in the last N days")] = None,
    ctx: Context = None,  # type: ignore[assignment]
) -> ReferenceResult:
    from mcp_server.refs import find_references as engine

    return await run_engine(
        ctx, engine, keyword, category=category, sources=sources, max_results=max_results, days=days,
    )


# --------------------------------------------------------------------------- timeline


@mcp.tool(
    name="timeline_analyze",
    title="Analyze an in-kernel probe timeline",
    description=(
        "Decode a probe buffer (FlashInfer profiler / kernelscope probe format, .bin or .npy) of a persistent or "
        "multi-phase kernel: per phase and occurrence the wall, slowest and mean block time, imbalance, start "
        "skew, last-finishing block, barrier waits, the critical path and ranked verdicts. Optionally writes "
        "Perfetto JSON and a Gantt PNG."
    ),
    annotations=WRITES_FILES,
)
async def timeline_analyze(
    buffer_path: Annotated[str, Field(description="Probe buffer: raw little-endian uint64 (.bin) or .npy")],
    event_names: Annotated[Optional[list[str] | str], Field(description="Event names in event-id order (id 0 first): a list, 'N1,N2,...', or a names file (one per line); default <buffer stem>.events beside the buffer")] = None,
    tag_layout: Annotated[Optional[Literal["legacy", "sm"]], Field(description="Tag layout: legacy (block_group<<12) or sm (sm_id<<24 | block<<12); default auto-detect")] = None,
    overhead_path: Annotated[Optional[str], Field(description="JSON of kernel times with/without probes; default <buffer stem>.overhead.json")] = None,
    perfetto_out: Annotated[Optional[str], Field(description="Write a Perfetto/Chrome trace JSON here")] = None,
    png_out: Annotated[Optional[str], Field(description="Write a Gantt chart PNG here")] = None,
    ctx: Context = None,  # type: ignore[assignment]
) -> TimelineAnalysis:
    from mcp_server.timeline.analysis import analyze_timeline as engine

    return await run_engine(
        ctx, engine, buffer_path, event_names, tag_layout=tag_layout, overhead_path=overhead_path,
        perfetto_path=perfetto_out, png_path=png_out, progress=True,
    )


@mcp.tool(
    name="timeline_compare",
    title="Compare two probe timelines (before/after)",
    description=(
        "Analyze two probe buffers of the same kernel and compare every phase before and after: wall, slowest, "
        "mean, imbalance, skew, barrier waits and critical-path time, so cost moving between phases is visible."
    ),
    annotations=READ_ONLY,
)
async def timeline_compare(
    before_path: Annotated[str, Field(description="Probe buffer before the change (.bin or .npy)")],
    after_path: Annotated[str, Field(description="Probe buffer after the change (.bin or .npy)")],
    event_names: Annotated[Optional[list[str] | str], Field(description="Event names in event-id order for both buffers: a list, 'N1,N2,...', or a names file")] = None,
    tag_layout: Annotated[Optional[Literal["legacy", "sm"]], Field(description="Tag layout override; default auto-detect")] = None,
    ctx: Context = None,  # type: ignore[assignment]
) -> TimelineComparison:
    from mcp_server.timeline.compare import compare_timelines as engine

    return await run_engine(ctx, engine, before_path, after_path, event_names, tag_layout=tag_layout, progress=True)



def main() -> None:
    """Run on stdio (``python -m mcp_server`` / ``kernelscope serve``)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    mcp.run("stdio")

