"""Rich views of trace-set results (the text faces of ``kernelscope traceset analyze|compare``)."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mcp_server.tracesets.models import TraceSetAnalysis, TraceSetComparison

MAX_RANK_COLUMNS = 8
MAX_ROWS = 15


def _table(title: str, cols: list[str], names: list[str] | None = None) -> Table:
    """Numbers right-aligned; the first column (the name a person acts on) never cut (up to 40 characters)."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    width = min(40, max((len(n) for n in names or []), default=0)) or None
    for i, c in enumerate(cols):
        t.add_column(c, no_wrap=True, justify="left" if i == 0 else "right", min_width=width if i == 0 else None)
    return t


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
                  escape(r.path.rsplit("/", 1)[-1]))
    c.print(t)
    ranks = _shown_ranks(res)
    if res.layers:
        t = _table(f"Layers ({res.layer_source}), us per rank", ["Layer", *map(str, ranks), "Slowest", "Imbalance"],
                   [x.name for x in res.layers[:MAX_ROWS * 4]])
        for x in sorted(res.layers, key=lambda x: x.index)[:MAX_ROWS * 4]:
            t.add_row(escape(x.name), *(f"{x.per_rank_us.get(r, 0.0):,.1f}" for r in ranks), str(x.slowest_rank),
                      f"{x.imbalance:.3f}x")
        c.print(t)
    t = _table("Modules with the largest excess (slowest - mean), us per rank",
               ["Module", *map(str, ranks), "Slowest", "Imbalance"], [m.name for m in res.modules[:MAX_ROWS]])
    for m in res.modules[:MAX_ROWS]:
        t.add_row(escape(m.name), *(f"{m.per_rank_us.get(r, 0.0):,.1f}" for r in ranks), str(m.slowest_rank),
                  f"{m.imbalance:.3f}x")
    c.print(t)
    _collectives(res, c, ranks)
    for f in res.failed:
        c.print(f"[red]rank {f.rank} not analysed:[/] {escape(f.error)}")
    for w in res.warnings:
        c.print(f"[yellow]warning[/] {w.code}: {escape(w.message)}")
    for label, path in (("summary workbook", res.output_xlsx), ("heat map", res.output_html)):
        if path:
            c.print(f"{label}: {escape(path)}")


def _collectives(res: TraceSetAnalysis, c: Console, ranks: list[int]) -> None:
    col = res.collectives
    if col is None:
        return
    who = f"[bold red]rank {col.straggler_rank} arrives late[/]" if col.straggler_rank is not None else "no late rank"
    c.print(f"collectives ({escape(col.source)}): {col.matched} matched on every rank, {col.unmatched} unmatched; "
            f"{who}: {escape(col.evidence)}")
    t = _table("Collective wait per layer, us per rank (the late rank sets the start)",
               ["Layer", *map(str, ranks), "Late", "By"], [x.name for x in col.layers])
    for x in sorted(col.layers, key=lambda x: x.index)[:MAX_ROWS * 4]:
        t.add_row(escape(x.name), *(f"{x.per_rank_wait_us.get(r, 0.0):,.0f}" for r in ranks),
                  "-" if x.late_rank is None else str(x.late_rank), f"{x.lateness_us:,.0f}")
    c.print(t)


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
    c.print(t)
    t = _table(f"Modules (largest change of the slowest rank's time first; A = {la}, B = {lb})",
               ["Module", "A max", "B max", "Δ max", "Δ mean", "Slowest A/B"], [m.name for m in res.modules[:MAX_ROWS]])
    for m in res.modules[:MAX_ROWS]:
        t.add_row(escape(m.name), f"{m.a_max_us:,.1f}", f"{m.b_max_us:,.1f}", f"{m.delta_max_us:+,.1f}",
                  f"{m.delta_mean_us:+,.1f}", f"{m.a_slowest_rank}/{m.b_slowest_rank}")
    c.print(t)
    for w in res.warnings:
        c.print(f"[yellow]warning[/] {w.code}: {escape(w.message)}")
