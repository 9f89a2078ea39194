"""Rich renderers for ``recategorize``, ``budget`` and ``diff_modules`` results (terminal faces)."""
from __future__ import annotations

from typing import Any, Optional

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mcp_server.compare.matching import display_kernel_name
from mcp_server.compare.models import BlockDiff, BudgetResult, DiffResult

MATCH_LABEL = {"same": "=", "renamed": "≈", "category": "→ cat", "time": "→ time", "gone": "gone", "new": "new"}


def fmt_ratio(r: Optional[float]) -> str:
    return "—" if r is None else f"{r:.2f}x"


def fmt_gap(g: float) -> str:
    return f"{g:+,.1f}"


def short(name: Optional[str], width: int = 60) -> str:
    return display_kernel_name(name, width)


def _gap_style(g: float) -> str:
    return "red" if g > 0 else "green" if g < 0 else ""


def _side_line(res) -> str:
    parts = []
    for s in (res.a, res.b):
        extra = (f", {s.source_table}" + (" TRUNCATED" if s.truncated else "")
                 + (f", phase {s.phase}" if s.phase else ""))
        parts.append(f"[bold]{escape(s.label)}[/]: {escape(s.path)} ({s.kind}{extra}, {s.kernel_count} kernels)")
    return "\n".join(parts)


def _warnings(console: Console, res) -> None:
    for w in res.warnings:
        console.print(f"[yellow]warning[/] {escape(w.message)}")
    if res.mismatches:
        t = Table(title=f"Category mismatches (stored vs current rules): {len(res.mismatches)}", title_justify="left")
        for c in ("side", "kernel", "stored", "current", "us"):
            t.add_column(c, justify="right" if c == "us" else "left")
        for m in res.mismatches[:20]:
            t.add_row(escape(m.side), escape(short(m.kernel, 70)), m.stored, m.current, f"{m.us:,.1f}")
        console.print(t)


def render_budget(res: BudgetResult, console: Console) -> None:
    console.print(_side_line(res))
    la, lb = escape(res.a.label), escape(res.b.label)
    t = Table(title="Budget by category (sorted by |gap|)", title_justify="left")
    for c, right in (("category", False), (f"{la} us", True), (f"{la} %", True), (f"{lb} us", True),
                     (f"{lb} %", True), ("gap us (B-A)", True), ("ratio B/A", True)):
        t.add_column(c, justify="right" if right else "left")
    for r in res.rows:
        t.add_row(r.category, f"{r.a_us:,.1f}", f"{r.a_pct:.1f}", f"{r.b_us:,.1f}", f"{r.b_pct:.1f}",
                  Text(fmt_gap(r.gap_us), style=_gap_style(r.gap_us)), fmt_ratio(r.ratio))
    t.add_section()
    t.add_row("[bold]total[/]", f"{res.total_a_us:,.1f}", "100.0", f"{res.total_b_us:,.1f}", "100.0",
              Text(fmt_gap(res.gap_us), style=_gap_style(res.gap_us)), fmt_ratio(res.ratio))
    console.print(t)
    _warnings(console, res)


def block_panel(b: BlockDiff, la: str, lb: str) -> Panel:
    t = Table(show_edge=False, expand=False, pad_edge=False)
    t.add_column(f"{la} kernel", overflow="fold", max_width=48)
    t.add_column("cat")
    t.add_column("us", justify="right")
    t.add_column("", justify="center")
    t.add_column(f"{lb} kernel", overflow="fold", max_width=48)
    t.add_column("cat")
    t.add_column("us", justify="right")
    for m in b.matches:
        t.add_row(escape(short(m.a_name, 48)), m.a_category or "", f"{m.a_us:,.1f}" if m.a_name else "",
                  MATCH_LABEL[m.kind], escape(short(m.b_name, 48)), m.b_category or "",
                  f"{m.b_us:,.1f}" if m.b_name else "")
    notes = [Text.from_markup(f"[bold magenta]{a.kind}[/] {escape(a.message)}") for a in b.annotations]
    star = "★ " if b.optimize else ""
    title = (f"{star}{escape(b.block)}  {la} {b.a_us:,.1f} us ({b.a_count})  vs  {lb} {b.b_us:,.1f} us ({b.b_count})"
             f"  gap {fmt_gap(b.gap_us)} us  {fmt_ratio(b.ratio)}")
    return Panel(Group(t, *notes), title=title, title_align="left", border_style="red" if b.optimize else "blue")


def render_diff(res: DiffResult, console: Console, request: Any = None, *, panels: int = 6) -> None:
    if request is not None:  # the CLI's --top-n / --panels
        panels = request.top_n
    console.print(_side_line(res))
    la, lb = escape(res.a.label), escape(res.b.label)
    t = Table(title="Blocks (sorted by |gap|; ★ = optimise first)", title_justify="left")
    for c, right in (("", False), ("block", False), ("role", False), (f"{la} us", True), (f"{lb} us", True),
                     ("gap us (B-A)", True), ("ratio", True), ("kernels A/B", True), ("annotations", False)):
        t.add_column(c, justify="right" if right else "left")
    for b in res.blocks:
        kinds = ", ".join(sorted({a.kind for a in b.annotations}))
        t.add_row("★" if b.optimize else "", escape(b.block), escape(b.role), f"{b.a_us:,.1f}", f"{b.b_us:,.1f}",
                  Text(fmt_gap(b.gap_us), style=_gap_style(b.gap_us)), fmt_ratio(b.ratio),
                  f"{b.a_count}/{b.b_count}", kinds)
    t.add_section()
    t.add_row("", "[bold]total[/]", "", f"{res.total_a_us:,.1f}", f"{res.total_b_us:,.1f}",
              Text(fmt_gap(res.gap_us), style=_gap_style(res.gap_us)), fmt_ratio(res.ratio), "", "")
    console.print(t)
    shown = [b for b in res.blocks if b.annotations or b.optimize][:panels]
    for b in shown:
        console.print(block_panel(b, la, lb))
    _warnings(console, res)
    for label, p in (("xlsx", res.output_xlsx), ("html", res.output_html)):
        if p:
            console.print(f"wrote {label}: {escape(p)}")


def render_recategorize(res: Any, console: Console) -> None:
    """Per report: kernels whose category changed, the first changes, warnings."""
    t = Table(title=f"recategorize ({escape(res.categories_source)})", title_justify="left")
    cols = (("report", False), ("layout", False), ("kernels changed", True), ("cells", True), ("sheets", True))
    for c, right in cols:
        t.add_column(c, justify="right" if right else "left")
    for f in res.files:
        t.add_row(escape(f.output), escape(f.source), str(f.changed), str(f.rows_changed), str(len(f.sheets_updated)))
    console.print(t)
    for f in res.files:
        for c in f.changes[:20]:
            console.print(f"  {c.kernel[:100]}: {c.old} -> {c.new}", markup=False)
        if len(f.changes) > 20:
            console.print(f"  ... {len(f.changes) - 20} more (--json --detail lists all)")
        for w in f.warnings:
            console.print(f"warning: {w.message}", markup=False, style="yellow")
