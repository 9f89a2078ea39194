"""``analyze_trace``: the trace analyzer engine.

Stages: load (msgspec, numpy columns) -> link kernels to launches and the
spans enclosing them -> attribute CUDA-graph replays -> per-kernel DataFrame
-> module tree, per-type statistics, category and phase totals -> optional
xlsx report.

Phase: a kernel whose launch lies inside a phase marker is prefill / decode: a
python function named with ``forward_extend`` / ``forward_decode`` (SGLang), or
an annotation ``step[DECODE ...]`` / ``step[EXTEND ...]`` / ``capture_N_DECODE``
(SGLang) / ``execute_..._context_C(...)_generation_G(...)`` (C prefill, G decode
requests). Without a marker an eager kernel inherits the phase of the
root-module call it belongs to as inferred from that call's ``aten::embedding``
input ids: 2-D ids ``[batch, seq]`` with ``seq == 1`` are decode, ``seq > 1``
prefill; otherwise the phase stays ``''`` (unknown). A graph-replay kernel
without a marker takes the phase its reference teaches (the capture launch or
the aligned eager step it was attributed from), else ``graph``: replayed, phase
unknown (training and diffusion replay graphs too).

One module per stage: ``attribution`` (links, module paths, phases), ``replays`` (CUDA-graph
replays and captures), ``summary`` (the kernel table, module tree, statistics and totals); this
module runs them and says what the trace lacks (the coverage warnings).
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from mcp_server.core.categories import load_categories
from mcp_server.core.errors import WriteError
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.core.vocab import COMMUNICATION, ProgressFn, WarningCode
from mcp_server.traces._reader import BlockReader
from mcp_server.traces.attribution import Linked, PathTable, direct_attribution, kernel_phases, link
from mcp_server.traces.loader import RawTrace, launch_kind, load_trace
from mcp_server.traces.models import GraphAttribution, TraceAnalysis
from mcp_server.traces.replays import attribute_replays, capture_warning
from mcp_server.traces.requests import AnalyzeTraceRequest
from mcp_server.traces.summary import kernel_frame, summarise


@engine(AnalyzeTraceRequest)
def analyze_trace(req: AnalyzeTraceRequest, progress: Optional[ProgressFn] = None) -> TraceAnalysis:
    """Attribute every GPU kernel of a Kineto trace to module, category and phase.

    The faces call this one: the CLI imports it (numpy, msgspec) before it applies its memory limit.
    Python callers use ``mcp_server.traces.analyze_trace``, which starts reading the trace first."""
    return analyze(req, progress)


def analyze(req: AnalyzeTraceRequest, progress: Optional[ProgressFn] = None,
            blocks: Optional[BlockReader] = None) -> TraceAnalysis:
    """The analysis; ``blocks``: a started ``_reader.blocks`` iterator over ``req.trace_path`` (read-ahead)."""
    output_xlsx, reference_trace = req.output_xlsx, req.reference_trace
    total_steps = 6.0 + (1 if output_xlsx else 0) + (1 if reference_trace else 0)

    def report(done: float, msg: str) -> None:
        if progress:
            progress(done, total_steps, msg)

    rules = load_categories(req.categories)
    report(0, "reading trace")
    def reading(done: int, total: int) -> None:
        report(min(done / max(total, 1), 0.99), "reading trace")

    rt = load_trace(req.trace_path, progress=reading if progress else None, blocks=blocks)
    report(1, "linking kernels to launches and modules")
    lk = link(rt)
    warnings: list[Warning_] = rules.reserved_warnings() + _load_warnings(rt)
    table = PathTable()
    span_pc, path_code, confidence = direct_attribution(lk, table, len(rt.k_name))
    phase = kernel_phases(rt, lk)

    report(2, "attributing CUDA-graph replays")
    layer = np.full(len(rt.k_name), -1, dtype=np.int64)
    gstat = GraphAttribution()
    if lk.graph.any():
        warnings += attribute_replays(rt, lk, table, rules, reference_trace, report,
                                       path_code, confidence, phase, layer, gstat)
    else:
        warnings += capture_warning(rt, lk)

    report(3, "building the kernel table")
    arrays = table.arrays()
    report(4, "module tree and statistics")
    res = summarise(rt, lk, table, arrays, path_code, span_pc, phase, rules)
    res.graph = gstat
    res.breakdown = _breakdown(rt, lk, rules)
    res.warnings = warnings + res.warnings + _coverage_warnings(rt, lk, path_code)
    # the DataFrame is built on first access of ``res.kernels`` (pandas is not imported otherwise)
    res.with_kernels(lambda: kernel_frame(rt, lk, table, arrays, path_code, phase, confidence, layer, rules))
    res._raw = rt  # already held by the kernel-table builder above
    report(5, "summary ready")
    if output_xlsx:
        report(6, "writing the xlsx report")
        _write_report(res, output_xlsx)
    report(total_steps, "done")
    return res


def _load_warnings(rt: RawTrace) -> list[Warning_]:
    out = []
    if rt.skipped:
        out.append(Warning_(code=WarningCode.damaged_events, count=rt.skipped,
                            message=f"skipped {rt.skipped} damaged event(s) (missing fields or odd types), "
                                    f"e.g. {rt.skipped_examples[0]}"))
    if not len(rt.k_name):
        out.append(_no_gpu_warning(rt))
    return out


def _no_gpu_warning(rt: RawTrace) -> Warning_:
    """Why a trace gives no GPU kernel at all (``no_gpu_events``): never a silent zero."""
    ids, counts = np.unique(rt.l_name, return_counts=True)
    launches = sum(n for i, n in zip(ids.tolist(), counts.tolist()) if launch_kind(rt.names[i]) >= 0)
    if rt.skipped_gpu:
        why = (f"all {rt.skipped_gpu} of its GPU activity events (kernel/memcpy/memset) were damaged and "
               "skipped (see damaged_events); export the trace again")
    elif rt.profiler_ranges:
        why = (f"it holds {rt.profiler_ranges} cuda_profiler_range events: a CUPTI range-profiler trace records "
               "hardware counters per kernel, not a timeline; profile with ProfilerActivity.CUDA (activity "
               "tracing) for kernel durations, or read the counters with Nsight Compute")
    elif launches:
        why = (f"it holds {launches} kernel/copy launch call(s) but no GPU activity: GPU activity tracing was "
               "off or failed (ProfilerActivity.CUDA not enabled, CUPTI/roctracer unavailable), or it is a "
               "CUDA/HIP-graph capture (launches during capture run nothing): pass such a trace as "
               "reference_trace (--reference-trace) to attribute the replays of a replay trace")
    elif rt.event_count:
        why = ("it holds CPU events only (a CPU-only trace: the profiler ran without ProfilerActivity.CUDA, "
               "or no GPU work ran while it recorded)")
    else:
        why = "it holds no events"
    return Warning_(code=WarningCode.no_gpu_events,
                    message=f"no GPU kernel, copy or memset in the trace: {why}; every total here is 0")



def _us_text(us: float) -> str:
    return f"{us / 1e3:,.2f} ms" if us >= 1e3 else f"{us:,.1f} us"


def _coverage_warnings(rt: RawTrace, lk: Linked, path_code: np.ndarray) -> list[Warning_]:
    """Why eager kernels are unattributed, one warning per reason found (beside ``unattributed_kernels``; graph
    replays with nothing to learn from have ``replays_unattributed``)."""
    un = path_code <= 1
    if not un.any():
        return []
    dur = rt.k_dur
    total = float(dur.sum())

    def share(sel: np.ndarray) -> str:  # a mask or sorted indices of the GPU events
        picked = dur[sel]
        us = float(picked.sum())
        pct = 100.0 * us / total if total else 0.0
        return f"{len(picked)} GPU event(s), {_us_text(us)} ({pct:.1f}% of GPU time)"

    out: list[Warning_] = []
    eager_un = un & ~lk.graph
    if not len(lk.modules):
        if eager_un.any():
            out.append(Warning_(code=WarningCode.no_module_spans, count=int(eager_un.sum()), message=(
                f"the trace holds no nn.Module spans, so no kernel has a module ({share(eager_un)}): profile with "
                "with_stack=True (or with_modules=True) to attribute kernels to modules; categories and kernel "
                "names are still exact")))
        return out
    launched = lk.launch_idx >= 0
    if launched.any():
        early = eager_un & ~launched & (rt.k_ts < rt.k_ts[launched].min())
        if early.any():
            out.append(Warning_(code=WarningCode.kernels_before_first_step, count=int(early.sum()), message=(
                f"{share(early)} ran before the first kernel launched in the trace and have no launch event: work "
                "queued before the profiled steps that was still running when the profiler started recording; "
                "they cannot be attributed (the GPU time breakdown leaves them out); call "
                "torch.cuda.synchronize() before the profiled steps begin to keep them out of the trace")))
    mod_threads = np.unique(lk.modules.thread)
    idx = np.flatnonzero(eager_un & launched)
    if len(idx):
        lth = rt.l_thread[lk.launch_idx[idx]]
        off = idx[~np.isin(lth, mod_threads)]
        if len(off):
            ops = {rt.names[i] for i in np.unique(lk.cpu.name[lk.cpu_op[off][lk.cpu_op[off] >= 0]]).tolist()}
            why = ("the autograd engine's backward thread" if any("backward" in o.lower() for o in ops)
                   else "a thread that holds no module spans")
            out.append(Warning_(code=WarningCode.thread_without_modules, count=len(off), message=(
                f"{share(off)} were launched from {why}; module spans exist only on the thread that ran "
                "forward, so these have no module (backward kernels are listed by category and name)")))
        between = idx[np.isin(lth, mod_threads)]
        if len(between):
            out.append(Warning_(code=WarningCode.outside_modules, count=len(between), message=(
                f"{share(between)} were launched on a thread that runs modules but outside every module call "
                "(input preparation, sampling, copies between steps): they belong to no module; listed by "
                "category and name")))
    return out


def _breakdown(rt: RawTrace, lk: Linked, rules):
    """The GPU time breakdown (``traces.breakdown``): classes from the event kind and the category rules."""
    from mcp_server.traces import breakdown as B

    n = len(rt.k_name)
    if not n:
        return None
    names = rt.names
    used = np.unique(rt.k_name)
    comm_name = np.zeros(len(names), dtype=bool)
    comm_name[used] = [rules.classify(names[u]) == COMMUNICATION for u in used.tolist()]
    cls = np.full(n, B.COMPUTATION, dtype=np.int8)
    cls[comm_name[rt.k_name]] = B.COMMUNICATION
    cls[rt.k_kind != 0] = B.MEMORY
    return B.compute_breakdown(rt.k_ts, rt.k_dur, cls, rt.k_device, rt.k_stream, lk.launch_idx >= 0)


def _write_report(res: TraceAnalysis, output_xlsx: str | os.PathLike) -> None:
    from mcp_server.reports import write_analysis_report

    res.output_xlsx = str(output_xlsx)
    try:
        write_analysis_report(res, str(output_xlsx))
    except OSError as exc:
        raise WriteError(f"cannot write the report: {exc}", path=output_xlsx) from None
