"""Engines of the trace-set operations: ``analyze_trace_set`` and ``compare_trace_sets``.

The traces are found and ranked first (discover.py: bad sets are refused before any
work), each rank is analysed by the single-trace analyzer in a worker (executors.py),
and the parent combines the small per-rank summaries (combine.py) without re-reading
a trace (docs/ARCHITECTURE.md, "Trace sets").
"""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Optional

from mcp_server.core.atomic import check_replace
from mcp_server.core.errors import InputError, TraceSetError
from mcp_server.core.limits import memory_limit
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.core.vocab import ProgressFn, WarningCode
from mcp_server.tracesets import combine, report
from mcp_server.tracesets.discover import resolve_ranks
from mcp_server.tracesets.executors import (
    check_workers,
    default_workers,
    run_inline,
    run_pool,
    run_ray,
)
from mcp_server.tracesets.models import (
    ModuleDelta,
    RankDelta,
    RankFailure,
    RankRef,
    RankSummary,
    TraceSetAnalysis,
    TraceSetComparison,
)
from mcp_server.tracesets.requests import AnalyzeTraceSetRequest, CompareTraceSetsRequest
from mcp_server.tracesets.worker import RankTask


def rank_report_path(output_xlsx: str | os.PathLike, rank: int) -> str:
    """Where rank ``rank``'s own report goes beside the summary workbook: ``<stem>.rank<N>.xlsx``."""
    p = Path(output_xlsx)
    return str(p.with_name(f"{p.stem}.rank{rank}{p.suffix or '.xlsx'}"))


def check_rank_reports(output_xlsx: str, ranks: list[int], overwrite: bool) -> None:
    """The per-rank report paths follow the rules the faces apply to declared outputs: they stay in the
    summary's directory (no link out of it), and an existing file that is not a workbook is replaced only
    with ``overwrite``."""
    base = Path(output_xlsx).expanduser().resolve().parent
    for rank in ranks:
        p = Path(rank_report_path(Path(output_xlsx).expanduser(), rank))
        if not (p.exists() or p.is_symlink()):
            continue
        if p.resolve().parent != base:
            raise InputError(f"the rank report path {p} is a link out of {base}", hint="remove the link")
        if p.is_dir():
            raise InputError(f"the rank report path {p} is a directory", hint="move it, or choose another -o name")
        check_replace(p, "xlsx", field="rank report", overwrite=overwrite)


class _Run:
    """One executor run over the ranks of one or more sets, with progress per finished rank."""

    def __init__(self, req: AnalyzeTraceSetRequest | CompareTraceSetsRequest, progress: Optional[ProgressFn]):
        self.executor, self.workers, self.ray_address = req.executor, req.workers, req.ray_address
        self.progress = progress
        self.memory = memory_limit(req.worker_memory)  # bytes of address space per worker (None: no limit)
        self.used_workers = 1

    def __call__(self, tasks: list[RankTask], labels: dict[str, str]) -> dict[str, tuple[dict | None, str | None]]:
        n = len(tasks)
        width = self.workers or default_workers(n)
        self.used_workers = 1 if self.executor == "inline" else min(width, n)
        if self.executor == "ray":
            outcomes = run_ray(tasks, self.ray_address, width)
        elif self.executor == "inline":
            outcomes = run_inline(tasks)
        else:
            outcomes = run_pool(tasks, width, self.memory)
        got: dict[str, tuple[dict | None, str | None]] = {}
        if self.progress:
            self.progress(0, n, f"analysing {n} rank trace(s) on {self.used_workers} {self.executor} worker(s)")
        for task, summary, error in outcomes:
            got[task.path] = (summary, error)
            if self.progress:
                state = "failed" if error else "done"
                self.progress(len(got), n, f"{labels.get(task.path, '')}rank {task.rank} {state}")
        return got


def _tasks(refs: list[RankRef], categories, reference_trace, output_xlsx, overwrite) -> list[RankTask]:
    return [RankTask(rank=r.rank, path=r.path, categories=categories, reference_trace=reference_trace,
                     output_xlsx=rank_report_path(output_xlsx, r.rank) if output_xlsx else None, overwrite=overwrite)
            for r in refs]


def _merge_warnings(summaries: list[RankSummary]) -> list[Warning_]:
    """The ranks' own warnings, one per code: which ranks, and the first rank's message."""
    by_code: dict[str, list[tuple[int, Warning_]]] = defaultdict(list)
    for s in summaries:
        for w in s.warnings:
            by_code[w.code].append((s.rank, w))
    out = []
    for code, hits in by_code.items():
        ranks = sorted({r for r, _ in hits})
        first = hits[0]
        out.append(Warning_(code=code, count=sum(w.count for _, w in hits), message=(
            f"rank{'s' if len(ranks) > 1 else ''} {combine.rank_ranges(ranks)}: {first[1].message}"
            + (f" (rank {first[0]}'s figures)" if len(ranks) > 1 else ""))))
    return out


def _assemble(refs: list[RankRef], world: Optional[int], found_warnings: list[Warning_],
              got: dict[str, tuple[dict | None, str | None]], run: _Run, threshold: float) -> TraceSetAnalysis:
    summaries, failed = [], []
    for r in refs:
        summary, error = got.get(r.path, (None, "not run"))
        if summary is None:
            failed.append(RankFailure(rank=r.rank, path=r.path, error=error or "no result"))
        else:
            summaries.append(RankSummary.model_validate(summary))
    if not summaries:
        first = failed[0]
        raise TraceSetError(f"no rank could be analysed; rank {first.rank}: {first.error}", path=first.path)
    warnings = list(found_warnings)
    if failed:
        warnings.append(Warning_(code=WarningCode.rank_failed, count=len(failed), message=(
            "ranks not analysed (the rest were): "
            + "; ".join(f"rank {f.rank} ({Path(f.path).name}): {f.error}" for f in failed[:8]))))
    warnings += _merge_warnings(summaries)
    sources = {r.rank: r.rank_source for r in refs}
    totals = combine.rank_totals(summaries, sources)
    layer_rows, layer_source = combine.layers(summaries)
    from mcp_server.tracesets.collectives import analyze_collectives

    comm, comm_warnings = analyze_collectives(summaries, {x.index: x.name for x in layer_rows}, world=world)
    warnings += comm_warnings
    return TraceSetAnalysis(
        world_size=world, rank_count=len(summaries), executor=run.executor, workers=run.used_workers,
        imbalance_threshold=threshold, total_kernel_us=sum(s.total_kernel_us for s in summaries), ranks=totals,
        straggler=combine.straggler(layer_rows, totals, threshold),
        layers=sorted(layer_rows, key=lambda x: (-x.excess_us, x.index)), layer_source=layer_source,
        modules=combine.modules(summaries), categories=combine.categories(summaries), failed=failed,
        collectives=comm, gpu_time=combine.gpu_time(summaries, totals), warnings=warnings)


@engine(AnalyzeTraceSetRequest)
def analyze_trace_set(req: AnalyzeTraceSetRequest, progress: Optional[ProgressFn] = None) -> TraceSetAnalysis:
    """Analyse every rank's trace of one run and read them across ranks."""
    check_workers(req.executor, req.workers, req.ray_address)  # before any trace is read
    refs, world, warnings = resolve_ranks(req.paths)
    if req.output_xlsx:
        check_rank_reports(req.output_xlsx, [r.rank for r in refs], req.overwrite)
    run = _Run(req, progress)
    got = run(_tasks(refs, req.categories, req.reference_trace, req.output_xlsx, req.overwrite), {})
    res = _assemble(refs, world, warnings, got, run, req.imbalance_threshold)
    if req.output_xlsx:
        res.output_xlsx = str(report.write_set_xlsx(res, req.output_xlsx))
    if req.output_html:
        res.output_html = str(report.write_set_html(res, req.output_html))
    return res


def _rank_deltas(a: TraceSetAnalysis, b: TraceSetAnalysis) -> tuple[list[RankDelta], list[int]]:
    at = {r.rank: r.total_kernel_us for r in a.ranks}
    bt = {r.rank: r.total_kernel_us for r in b.ranks}
    rows = []
    for rank in sorted(set(at) | set(bt)):
        x, y = at.get(rank), bt.get(rank)
        d = None if x is None or y is None else y - x
        rows.append(RankDelta(rank=rank, a_us=x, b_us=y, delta_us=d,
                              ratio=(y / x if x and y is not None else None)))
    rows.sort(key=lambda r: (r.delta_us is None, -abs(r.delta_us or 0.0), r.rank))
    return rows, sorted(set(at) ^ set(bt))


def _module_deltas(a: TraceSetAnalysis, b: TraceSetAnalysis) -> list[ModuleDelta]:
    am = {m.path: m for m in a.modules}
    bm = {m.path: m for m in b.modules}
    rows = []
    for path in list(am) + [p for p in bm if p not in am]:
        x, y = am.get(path), bm.get(path)
        one = x or y
        assert one is not None
        xa = max(x.per_rank_us.values(), default=0.0) if x else 0.0
        yb = max(y.per_rank_us.values(), default=0.0) if y else 0.0
        per = ({r: y.per_rank_us[r] - x.per_rank_us[r] for r in sorted(set(x.per_rank_us) & set(y.per_rank_us))}
               if x and y else {})
        rows.append(ModuleDelta(
            name=one.name, type=one.type, path=path, a_mean_us=x.mean_us if x else 0.0,
            b_mean_us=y.mean_us if y else 0.0, a_max_us=xa, b_max_us=yb,
            delta_mean_us=(y.mean_us if y else 0.0) - (x.mean_us if x else 0.0), delta_max_us=yb - xa,
            a_slowest_rank=x.slowest_rank if x else None, b_slowest_rank=y.slowest_rank if y else None,
            per_rank_delta_us=per))
    rows.sort(key=lambda m: (-abs(m.delta_max_us), m.path))
    return rows


@engine(CompareTraceSetsRequest)
def compare_trace_sets(req: CompareTraceSetsRequest, progress: Optional[ProgressFn] = None) -> TraceSetComparison:
    """Two multi-rank runs, rank by rank and aggregated over ranks (mean and slowest rank)."""
    a, b = req.a, req.b
    check_workers(req.executor, req.workers, req.ray_address)  # before any trace is read
    la, lb = req.labels or [Path(a.rstrip("/")).name or a, Path(b.rstrip("/")).name or b]
    refs_a, world_a, warn_a = resolve_ranks([a])
    refs_b, world_b, warn_b = resolve_ranks([b])
    shared = {r.path for r in refs_a} & {r.path for r in refs_b}
    if shared:
        raise TraceSetError(f"the two runs share trace files ({sorted(shared)[0]})", hint="give two different runs")
    run = _Run(req, progress)
    tags = {r.path: f"{la} " for r in refs_a} | {r.path: f"{lb} " for r in refs_b}
    got = run(_tasks(refs_a, req.categories, None, None, False) + _tasks(refs_b, req.categories, None, None, False),
              tags)
    sa = _assemble(refs_a, world_a, warn_a, got, run, req.imbalance_threshold)
    sb = _assemble(refs_b, world_b, warn_b, got, run, req.imbalance_threshold)
    ranks, only_one = _rank_deltas(sa, sb)
    warnings: list[Warning_] = []
    if only_one:
        warnings.append(Warning_(code=WarningCode.ranks_differ, count=len(only_one), message=(
            f"ranks present in one run only: {', '.join(map(str, only_one[:32]))}; aggregates use each run's own "
            "ranks")))
    modules = _module_deltas(sa, sb)
    # each run's own reading without its module and category lists (``modules`` holds both runs' figures)
    # and without the list of single collectives (its per-layer and per-rank waits stay)
    sa, sb = (s.model_copy(update={"modules": [], "categories": [], "collectives": s.collectives and
                                   s.collectives.model_copy(update={"instances": []})}) for s in (sa, sb))
    return TraceSetComparison(
        labels=[la, lb], a=sa, b=sb, ranks=ranks, modules=modules,
        total_delta_us=sb.total_kernel_us - sa.total_kernel_us,
        slowest_rank_delta_us=sb.ranks[0].total_kernel_us - sa.ranks[0].total_kernel_us,  # ranks: slowest first
        warnings=warnings)
