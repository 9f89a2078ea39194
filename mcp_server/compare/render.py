"""Rich renderers for ``recategorize``, ``budget`` and ``diff_modules`` results (terminal faces).

Designed for 80 columns first (a pipe, a laptop terminal): warnings come before the tables;
block names are never cut (secondary columns are dropped instead: the role and the launch
counts below 120 columns); block panels stack each matched pair on its own lines (kernel
names folded, not cut, with launch counts and input dims) and go side by side only from 140
columns. The CLI's ``--width`` sets the console width.
"""
from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mcp_server.compare.matching import dims_key
from mcp_server.compare.models import BlockDiff, BudgetResult, DiffResult, KernelMatch, fmt_ratio, side_reference
from mcp_server.core.kernel_names import display_kernel_name as short
from mcp_server.core.textable import Col, TextTable, print_line, print_warnings

MATCH_LABEL = {"same": "=", "renamed": "≈", "category": "→ cat", "time": "→ time", "gone": "gone", "new": "new"}
NOTE_LETTER = {"FUSION": "F", "IMPROVE": "I", "MISSING": "M"}
WIDE = 120  # role and launch counts in the blocks table from here
SIDE_BY_SIDE = 140  # panels show A and B side by side from here


def fmt_gap(g: float) -> str:
    return f"{g:+,.1f}"


def _gap_text(g: float) -> Text:
    """The gap, red where B spends more, green where less."""
    return Text(fmt_gap(g), style="red" if g > 0 else "green" if g < 0 else "")


def _side_line(res) -> str:
    parts = []
    for key, s in (("A", res.a), ("B", res.b)):
        extra = (f", table {s.source_table}" + (" TRUNCATED" if s.truncated else "")
                 + (f", phase {s.phase}" if s.phase else "") + side_reference(s))
        parts.append(f"[bold]{key} = {escape(s.label)}[/]: {escape(s.path)} ({s.kind}{escape(extra)}, "
                     f"{s.kernel_count} kernels)")
    return "\n".join(parts)


def _mismatches(console: Console, res) -> None:
    if not res.mismatches:
        return
    t = TextTable([Col("side", justify="left"), Col("kernel", "name", min_width=24), Col("stored", justify="left"),
                   Col("current", justify="left"), Col("us")],
                  title=f"Category mismatches (stored vs current rules): {len(res.mismatches)}", title_justify="left")
    for m in res.mismatches[:20]:
        t.add_row(escape(m.side), short(m.kernel, 70), escape(m.stored), escape(m.current), f"{m.us:,.1f}")
    t.print(console)


def render_budget(res: BudgetResult, console: Console, request: Any = None) -> None:
    print_line(console, _side_line(res))
    print_warnings(console, res.warnings)
    t = TextTable([Col("category", justify="left"), Col("A us"), Col("A %"), Col("B us"), Col("B %"),
                   Col("gap B-A"), Col("B/A")],
                  title="Budget by category (sorted by |gap|; A, B as above)", title_justify="left")
    for r in res.rows:
        t.add_row(escape(r.category), f"{r.a_us:,.1f}", f"{r.a_pct:.1f}", f"{r.b_us:,.1f}", f"{r.b_pct:.1f}",
                  _gap_text(r.gap_us), fmt_ratio(r.ratio))
    t.add_section()
    t.add_row("[bold]total[/]", f"{res.total_a_us:,.1f}", "100.0", f"{res.total_b_us:,.1f}", "100.0",
              _gap_text(res.gap_us), fmt_ratio(res.ratio))
    t.print(console)
    _mismatches(console, res)


def _dims(d: str) -> str:
    d = dims_key(d)
    return f"[dim]{escape(d)}[/]" if d else ""


def _us_count(us: float, n: int, present: bool) -> str:
    return f"{us:,.1f} ×{n}" if present else "—"


def _stacked_table(b: BlockDiff) -> Table:
    """One matched pair per row: the kernel (A over B when they differ, folded), dims dimmed below."""
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=True)
    t.add_column("", no_wrap=True)
    t.add_column("kernel (A / B), input dims", overflow="fold", ratio=1)
    t.add_column("A us ×n", justify="right", no_wrap=True)
    t.add_column("B us ×n", justify="right", no_wrap=True)
    for m in b.matches:
        t.add_row(MATCH_LABEL[m.kind], _kernel_cell(m), _us_count(m.a_us, m.a_count, bool(m.a_name)),
                  _us_count(m.b_us, m.b_count, bool(m.b_name)))
    return t


def _kernel_cell(m: KernelMatch) -> str:
    lines = []
    if m.a_name and m.b_name and m.a_name == m.b_name:
        lines.append(escape(short(m.a_name, 60)) + (f" [dim]({m.a_category})[/]" if m.a_category else ""))
        if dims_key(m.a_dims) == dims_key(m.b_dims):
            if m.a_dims:
                lines.append(_dims(m.a_dims))
        else:
            lines.append(" | ".join(_dims(x) or "—" for x in (m.a_dims, m.b_dims)))
        return "\n".join(lines)
    for key, name, cat, dims in (("A", m.a_name, m.a_category, m.a_dims), ("B", m.b_name, m.b_category, m.b_dims)):
        if name:
            lines.append(f"{key}: {escape(short(name, 60))}" + (f" [dim]({cat})[/]" if cat else ""))
            if dims:
                lines.append("   " + _dims(dims))
    return "\n".join(lines)


def _side_by_side_table(b: BlockDiff, la: str, lb: str) -> Table:
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    t.add_column(f"{la} kernel", overflow="fold", max_width=56)
    t.add_column("A us ×n", justify="right", no_wrap=True)
    t.add_column("", justify="center", no_wrap=True)
    t.add_column(f"{lb} kernel", overflow="fold", max_width=56)
    t.add_column("B us ×n", justify="right", no_wrap=True)
    t.add_column("input dims (A | B)", overflow="fold", max_width=44)
    for m in b.matches:
        same = dims_key(m.a_dims) == dims_key(m.b_dims)
        dims = _dims(m.a_dims) if same else " | ".join(_dims(x) or "—" for x in (m.a_dims, m.b_dims))
        t.add_row(escape(short(m.a_name, 56)), _us_count(m.a_us, m.a_count, bool(m.a_name)), MATCH_LABEL[m.kind],
                  escape(short(m.b_name, 56)), _us_count(m.b_us, m.b_count, bool(m.b_name)), dims)
    return t


def block_panel(b: BlockDiff, la: str, lb: str, width: int = 80) -> Panel:
    t = _side_by_side_table(b, la, lb) if width >= SIDE_BY_SIDE else _stacked_table(b)
    notes = [Text.from_markup(f"[bold magenta]{a.kind}[/] {escape(a.message)}", emoji=False) for a in b.annotations]
    head = [Text.from_markup(f"[dim]{escape(b.role)}[/]", emoji=False)] if b.role else []
    star = "★ " if b.optimize else ""
    title = (f"{star}{escape(b.block)}: A {b.a_us:,.1f} us ×{b.a_count} | B {b.b_us:,.1f} us ×{b.b_count} | "
             f"gap {fmt_gap(b.gap_us)} ({fmt_ratio(b.ratio)})")
    return Panel(Group(*head, t, *notes), title=title, title_align="left",
                 border_style="red" if b.optimize else "blue")


def blocks_table(res: DiffResult, width: int) -> TextTable:
    wide = width >= WIDE
    cols = [Col(""), Col("block", justify="left")] + ([Col("role", "text", min_width=20)] if wide else [])
    cols += [Col("A us"), Col("B us"), Col("gap B-A"), Col("B/A")] + ([Col("launches A/B")] if wide else [])
    cols.append(Col("notes", justify="left"))
    t = TextTable(cols, title="Blocks (sorted by |gap|; ★ optimise first; notes: F fusion, I improve, M missing)",
                  title_justify="left")
    for b in res.blocks:
        kinds = sorted({a.kind for a in b.annotations})
        notes = ", ".join(kinds) if wide else "".join(NOTE_LETTER[k] for k in kinds)
        row: list[str | Text] = ["★" if b.optimize else "", escape(b.block)]
        if wide:
            row.append(escape(b.role))
        row += [f"{b.a_us:,.1f}", f"{b.b_us:,.1f}", _gap_text(b.gap_us), fmt_ratio(b.ratio)]
        row += ([f"{b.a_count}/{b.b_count}"] if wide else []) + [notes]
        t.add_row(*row)
    t.add_section()
    total: list[str | Text] = ["", "[bold]total[/]"]
    if wide:
        total.append("")
    total += [f"{res.total_a_us:,.1f}", f"{res.total_b_us:,.1f}", _gap_text(res.gap_us), fmt_ratio(res.ratio)]
    total += ([""] if wide else []) + [""]
    t.add_row(*total)
    return t


def render_diff(res: DiffResult, console: Console, request: Any = None, *, panels: int = 6) -> None:
    if request is not None:  # the CLI's --top-n / --panels
        panels = request.top_n
    print_line(console, _side_line(res))
    print_warnings(console, res.warnings)
    blocks_table(res, console.width).print(console)
    la, lb = escape(res.a.label), escape(res.b.label)
    shown = [b for b in res.blocks if b.annotations or b.optimize][:panels]
    for b in shown:
        console.print(block_panel(b, la, lb, console.width))
    _mismatches(console, res)
    for label, p in (("xlsx", res.output_xlsx), ("html", res.output_html)):
        if p:
            print_line(console, f"wrote {label}: {escape(p)}")


def render_recategorize(res: Any, console: Console, request: Any = None) -> None:
    """Per report: kernels whose category changed, the first changes, warnings."""
    for f in res.files:
        for w in f.warnings:
            console.print(f"warning: {w.message}", markup=False, style="yellow")
    t = TextTable([Col("report", "name", min_width=24), Col("layout", justify="left"), Col("kernels changed"),
                   Col("cells"), Col("sheets")],
                  title=f"recategorize ({escape(res.categories_source)})", title_justify="left")
    for f in res.files:
        t.add_row(f.output, escape(f.source), str(f.changed), str(f.rows_changed), str(len(f.sheets_updated)))
    t.print(console)
    for f in res.files:
        for c in f.changes[:20]:
            console.print(f"  {c.kernel[:100]}: {c.old} -> {c.new}", markup=False)
        if len(f.changes) > 20:
            console.print(f"  ... {len(f.changes) - 20} more (--json --detail lists all)")
