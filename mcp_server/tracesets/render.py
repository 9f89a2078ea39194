"""Rich views of trace-set results (the text faces of ``kernelscope traceset analyze|compare``)."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from mcp_server.core.textable import Col, TextTable, print_line, print_warnings
from mcp_server.tracesets.models import TraceSetAnalysis, TraceSetComparison

MAX_RANK_COLUMNS = 8
MAX_ROWS = 15


def _table(title: str, cols: list[str]) -> TextTable:
    """Numbers right-aligned and never cut; names (modules, layers, trace files) shortened from the middle."""
    kinds = ["name" if c in ("Layer", "Module", "Trace") else "value" for c in cols]
    return TextTable([Col(c, k, min_width=20 if k == "name" else 0) for c, k in zip(cols, kinds)],  # type: ignore[arg-type]
                     title=title, title_justify="left")


def _shown_ranks(res: TraceSetAnalysis) -> list[int]:
    """Rank columns: all when few; else the slowest ones, in rank order."""
    ranks = [r.rank for r in res.ranks]  # slowest first
    return sorted(ranks[:MAX_RANK_COLUMNS])


def _verdict(res: TraceSetAnalysis) -> str:
    st = res.straggler
    if st.kind == "fixed":
        return f"[bold red]straggler: rank {st.rank}[/] (fixed)"
    if st.kind == "moving":
        return "[bold yellow]the slow rank moves[/]"
    return "[bold green]no straggler[/]"


def render_set(res: TraceSetAnalysis, console: Console, request: object = None) -> None:
    c = console
    world = f" of world size {res.world_size}" if res.world_size else ""
    c.print(f"[bold]{res.rank_count} ranks[/]{world}, {res.total_kernel_us:,.1f} us kernel time in all "
            f"({res.executor}, {res.workers} worker(s))")
    c.print(f"{_verdict(res)}: {escape(res.straggler.evidence)}")
    t = _table("Ranks (slowest first)", ["Rank", "Kernel us", "Vs mean", "Kernels", "Trace"])
    for r in res.ranks[:MAX_ROWS]:
        t.add_row(str(r.rank), f"{r.total_kernel_us:,.1f}", f"{r.vs_mean:.3f}x", f"{r.kernel_count:,}",
                  r.path.rsplit("/", 1)[-1])
    t.print(c)
    if res.gpu_time:
        t = _table(f"GPU time per rank ({res.gpu_time[0].window}), us",
                   ["Rank", "Window", "Busy %", "Idle", "Compute", "Comm", "Exposed comm", "Overlap %"])
        for g in res.gpu_time[:MAX_ROWS]:
            b = g.total
            t.add_row(str(g.rank), f"{b.window_us:,.1f}", f"{b.busy_pct:.1f}", f"{b.idle_us:,.1f}",
                      f"{b.computation_us:,.1f}", f"{b.communication_us:,.1f}", f"{b.exposed_communication_us:,.1f}",
                      "-" if b.comm_overlap_pct is None else f"{b.comm_overlap_pct:.1f}")
        t.print(c)
    ranks = _shown_ranks(res)
    if res.layers:
        t = _table(f"Layers ({res.layer_source}), us per rank", ["Layer", *map(str, ranks), "Slowest", "Imbalance"])
        for x in sorted(res.layers, key=lambda x: x.index)[:MAX_ROWS * 4]:
            t.add_row(x.name, *(f"{x.per_rank_us.get(r, 0.0):,.1f}" for r in ranks), str(x.slowest_rank),
                      f"{x.imbalance:.3f}x")
        t.print(c)
    t = _table("Modules with the largest excess (slowest - mean), us per rank",
               ["Module", *map(str, ranks), "Slowest", "Imbalance"])
    for m in res.modules[:MAX_ROWS]:
        t.add_row(m.name, *(f"{m.per_rank_us.get(r, 0.0):,.1f}" for r in ranks), str(m.slowest_rank),
                  f"{m.imbalance:.3f}x")
    t.print(c)
    _collectives(res, c, ranks)
    both = _why_both(res)
    if both:
        c.print(f"[bold]reading both[/]: {escape(both)}")
    for f in res.failed:
        c.print(f"[red]rank {f.rank} not analysed:[/] {escape(f.error)}")
    print_warnings(c, res.warnings)
    for label, path in (("summary workbook", res.output_xlsx), ("heat map", res.output_html)):
        if path:
            print_line(c, f"{label}: {escape(path)}")


def _why_both(res: TraceSetAnalysis) -> str:
    """When the collectives name a late rank that kernel time does not, say why both hold (the demo's
    'rank 2 late each layer' set reads 'no straggler' by kernel time)."""
    col = res.collectives
    late = col.straggler_rank if col is not None else None
    st = res.straggler
    if late is None or (st.kind == "fixed" and st.rank == late):
        return ""
    by_time = (f"kernel time names rank {st.rank}" if st.kind == "fixed" else
               "kernel time names no straggler" if st.kind != "moving" else "kernel time shows a moving slow rank")
    return (f"{by_time}, yet rank {late} arrives late at the collectives: its GPU kernels take no longer, so it is "
            f"delayed before it launches them (host work, data loading, scheduling), and the other ranks' collectives "
            f"wait for it; kernel time does not count that wait (see 'Collective wait per layer')")


def _collectives(res: TraceSetAnalysis, c: Console, ranks: list[int]) -> None:
    col = res.collectives
    if col is None:
        return
    who = f"[bold red]rank {col.straggler_rank} arrives late[/]" if col.straggler_rank is not None else "no late rank"
    print_line(c, f"collectives ({escape(col.source)}): {col.matched} matched on every rank, "
               f"{col.unmatched} unmatched; {who}: {escape(col.evidence)}")
    t = _table("Collective wait per layer, us per rank (the late rank sets the start)",
               ["Layer", *map(str, ranks), "Late", "By"])
    for x in sorted(col.layers, key=lambda x: x.index)[:MAX_ROWS * 4]:
        t.add_row(x.name, *(f"{x.per_rank_wait_us.get(r, 0.0):,.0f}" for r in ranks),
                  "-" if x.late_rank is None else str(x.late_rank), f"{x.lateness_us:,.0f}")
    t.print(c)


def render_compare(res: TraceSetComparison, console: Console, request: object = None) -> None:
    c = console
    la, lb = res.labels
    c.print(f"[bold]{escape(la)}[/] ({res.a.rank_count} ranks) vs [bold]{escape(lb)}[/] ({res.b.rank_count} ranks): "
            f"total {res.total_delta_us:+,.1f} us, slowest rank {res.slowest_rank_delta_us:+,.1f} us")
    c.print(f"{escape(la)}: {_verdict(res.a)}; {escape(lb)}: {_verdict(res.b)}")
    t = _table("Ranks (largest change first)", ["Rank", f"{la} us", f"{lb} us", "Delta us", "B/A"])
    for r in res.ranks[:MAX_ROWS]:
        t.add_row(str(r.rank), "-" if r.a_us is None else f"{r.a_us:,.1f}", "-" if r.b_us is None else f"{r.b_us:,.1f}",
                  "-" if r.delta_us is None else f"{r.delta_us:+,.1f}", "-" if r.ratio is None else f"{r.ratio:.3f}x")
    t.print(c)
    t = _table(f"Modules (largest change of the slowest rank's time first; A = {la}, B = {lb})",
               ["Module", "A max", "B max", "Δ max", "Δ mean", "Slowest A/B"])
    for m in res.modules[:MAX_ROWS]:
        t.add_row(m.name, f"{m.a_max_us:,.1f}", f"{m.b_max_us:,.1f}", f"{m.delta_max_us:+,.1f}",
                  f"{m.delta_mean_us:+,.1f}", f"{m.a_slowest_rank}/{m.b_slowest_rank}")
    t.print(c)
    print_warnings(c, res.warnings)
