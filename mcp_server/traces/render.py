"""Rich summary of a ``TraceAnalysis`` (the text face of ``kernelscope analyze``)."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mcp_server.traces.models import TraceAnalysis


def _us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:,.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:,.2f} ms"
    return f"{us:,.1f} us"


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


_TIME_COLS = {"Mean", "Total", "Self"}


def _table(title: str, cols: list[str], **_: object) -> Table:
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(cols):
        t.add_column(c, justify="left" if i == 0 or c.startswith("Top") else "right", no_wrap=True,
                     min_width=None if i == 0 or c.startswith("Top") else max(len(c), 9 if c in _TIME_COLS else 0))
    return t


def render_analysis(res: TraceAnalysis, console: Console, *, max_modules: int = 25, max_tree_depth: int = 3) -> None:
    c = console
    c.print(f"[bold]{escape(res.trace)}[/]  {escape(res.device or 'unknown device')} ({res.platform})")
    share = 100.0 * res.attributed_count / res.kernel_count if res.kernel_count else 0.0
    c.print(f"{res.kernel_count:,} GPU kernels, {_us(res.total_kernel_us)} kernel time; "
            f"{res.attributed_count:,} attributed ({share:.1f}%), {res.unattributed_count:,} unattributed "
            f"({_us(res.unattributed_us)})")
    if res.phases:
        c.print("phases: " + ", ".join(f"{p.phase or 'unknown'} {p.kernel_count:,} kernels {_us(p.total_us)}"
                                       for p in res.phases))
    g = res.graph
    if g.graph_kernel_count:
        c.print(f"CUDA-graph replays: {g.graph_kernel_count:,} kernels, {g.attributed_count:,} attributed by "
                f"{g.method} (mean confidence {g.mean_confidence:.2f}); layer cut: {g.layer_cut}, "
                f"{g.layers_found} layer(s) per replay")
        for note in g.notes:
            c.print(f"  {escape(note)}")

    t = _table("Categories", ["Category", "Count", "Total", "%"])
    for cat in res.categories:
        t.add_row(escape(cat.category), f"{cat.count:,}", _us(cat.total_us), f"{cat.pct:.1f}")
    c.print(t)

    t = _table("Module types", ["Type", "Calls", "Mean", "Total", "% parent", "Top kernel"], squeeze="Top kernel")
    for m in res.modules[:max_modules]:
        t.add_row(escape(_cut(m.type, 20)), f"{m.count:,}", _us(m.mean_us), _us(m.total_us),
                  f"{m.pct_of_parent:.1f}", escape(_cut(m.top_kernel, 16)))
    if len(res.modules) > max_modules:
        t.caption = f"{len(res.modules) - max_modules} more module types (use --json or -o)"
    c.print(t)

    shown = [n for n in res.tree if n.depth <= max_tree_depth][:40]
    if shown:
        t = _table(f"Module tree (depth <= {max_tree_depth})",
                   ["Module", "Total", "Self", "Kernels", "Phase", "Top category"],
                   squeeze="Top category")
        for n in shown:
            topcat = next(iter(n.breakdown.items()), ("", 0.0))
            t.add_row(escape(_cut("  " * n.depth + n.name, 26)), _us(n.total_us), _us(n.self_us), f"{n.kernel_count:,}",
                      n.phase or "-", escape(topcat[0]))
        c.print(t)
    for w in res.warnings:
        c.print(f"[yellow]warning[/] {escape(w.code)}: {escape(w.message)}")
    if res.output_xlsx:
        c.print(f"report written: {escape(res.output_xlsx)}")
