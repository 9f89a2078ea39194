"""Rich summary of a ``TraceAnalysis`` (the text face of ``kernelscope analyze``)."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from mcp_server.core.kernel_names import display_kernel_name
from mcp_server.core.textable import Col, TextTable, print_line, print_warnings
from mcp_server.traces.models import TraceAnalysis


def _us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:,.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:,.2f} ms"
    return f"{us:,.1f} us"


_TIME_COLS = {"Mean", "Total", "Self"}
#: how the phases read in the text view ('' has no evidence; 'graph' is a replay with none)
_PHASE_LABEL = {"": "unknown", "graph": "graph (replayed, phase unknown)"}


def _table(title: str, cols: list[str], *, name_width: int = 0, wide: bool = True, **_: object) -> TextTable:
    """A table for the text face (textable.py): numbers and categories never cut; the first column (the
    module a person acts on) and 'Top ...' kernel names shortened from the middle when the width is short."""
    out = []
    for i, c in enumerate(cols):
        if i == 0 and c != "Category":
            out.append(Col(c, "name", min_width=min(max(name_width, len(c)), 32)))
        elif c.startswith("Top"):
            out.append(Col(c, "name", min_width=24 if wide else 16))
        elif i == 0:
            out.append(Col(c, justify="left"))
        else:
            out.append(Col(c))
    return TextTable(out, title=title, title_justify="left")


#: columns worth their room only from this width: mean, top kernel, phase, top category
WIDE = 120


def render_analysis(res: TraceAnalysis, console: Console, request: object = None, *, max_modules: int = 25,
                    max_tree_depth: int = 3) -> None:
    c = console
    w = getattr(request, "width", None) if request is not None else None
    if w:
        c.width = int(w)
    wide = c.width >= WIDE
    print_line(c, f"[bold]{escape(res.trace)}[/]  {escape(res.device or 'unknown device')} ({res.platform})")
    share = 100.0 * res.attributed_count / res.kernel_count if res.kernel_count else 0.0
    c.print(f"{res.kernel_count:,} GPU kernels, {_us(res.total_kernel_us)} kernel time; "
            f"{res.attributed_count:,} attributed ({share:.1f}%), {res.unattributed_count:,} unattributed "
            f"({_us(res.unattributed_us)})")
    if res.phases:
        c.print("phases: " + ", ".join(f"{_PHASE_LABEL.get(p.phase, p.phase)} {p.kernel_count:,} kernels "
                                       f"{_us(p.total_us)}" for p in res.phases))
    g = res.graph
    if g.graph_kernel_count:
        how = (f"{g.attributed_count:,} attributed by {g.method} (mean confidence {g.mean_confidence:.2f})"
               if g.attributed_count else "none attributed (see the warnings)")
        c.print(f"CUDA-graph replays: {g.graph_kernel_count:,} kernels, {how}; layer cut: {g.layer_cut}, "
                f"{g.layers_found} layer(s) per replay")
        for note in g.notes:
            c.print(f"  {escape(note)}")
    b = res.breakdown
    if b is not None:
        t_ = b.total
        c.print(f"GPU time ({escape(b.window)}, window {_us(t_.window_us)}): busy {_us(t_.busy_us)} "
                f"({t_.busy_pct:.1f}%), idle {_us(t_.idle_us)}; computation {_us(t_.computation_us)}, "
                f"communication {_us(t_.communication_us)} (exposed {_us(t_.exposed_communication_us)}"
                + (f", {t_.comm_overlap_pct:.1f}% under compute" if t_.comm_overlap_pct is not None else "") + "), "
                f"memcpy/memset {_us(t_.memory_us)}; {len(b.streams)} stream(s)")
    print_warnings(c, res.warnings)  # before the tables: a person reads them before trusting the numbers

    t = _table("Categories", ["Category", "Count", "Total", "%"])
    for cat in res.categories:
        t.add_row(escape(cat.category), f"{cat.count:,}", _us(cat.total_us), f"{cat.pct:.1f}")
    t.print(c)

    mods = res.modules[:max_modules]
    cols = ["Type", "Calls"] + (["Mean"] if wide else []) + ["Total", "% parent"] + (["Top kernel"] if wide else [])
    t = _table("Module types", cols, name_width=max([len(m.type) for m in mods] + [4]), wide=wide)
    for m in mods:
        row = [m.type, f"{m.count:,}"] + ([_us(m.mean_us)] if wide else []) + [
            _us(m.total_us), f"{m.pct_of_parent:.1f}"]
        if wide:
            row.append(display_kernel_name(m.top_kernel, 48))
        t.add_row(*row)
    if len(res.modules) > max_modules:
        t.table_kw["caption"] = f"{len(res.modules) - max_modules} more module types (use --json or -o)"
    if mods:
        t.print(c)
    else:
        c.print("Module types: none, no kernel is attributed to a module (see the warnings above)")

    shown = [n for n in res.tree if n.depth <= max_tree_depth][:40]
    if shown:
        cols = ["Module", "Total", "Self", "Kernels"] + (["Phase", "Top category"] if wide else [])
        labels = ["  " * n.depth + n.name for n in shown]
        t = _table(f"Module tree (depth <= {max_tree_depth})", cols, name_width=max(len(x) for x in labels),
                   wide=wide)
        for n, label in zip(shown, labels):
            topcat = next(iter(n.breakdown.items()), ("", 0.0))
            row = [label, _us(n.total_us), _us(n.self_us), f"{n.kernel_count:,}"]
            if wide:
                row += [n.phase or "-", escape(topcat[0])]
            t.add_row(*row)
        t.print(c)
    if res.output_xlsx:
        print_line(c, f"report written: {escape(res.output_xlsx)}")
