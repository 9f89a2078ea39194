"""Text renderings of timeline results (rich), for the CLI and the plain-text report."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from mcp_server.core.textable import Col, TextTable, print_line, print_warnings
from mcp_server.timeline.analysis import _fmt_ns
from mcp_server.timeline.models import TimelineAnalysis, TimelineComparison

#: the secondary columns (CV, skew, slowest / last blocks, slowest, mean) from this width
WIDE = 120


def _table(title: str, cols: list[str], rows: list[list]) -> TextTable:
    """Phase and event names (the first column) shortened from the middle, block lists wrapped, numbers never cut
    (textable.py)."""
    spec = [Col(c, "name", min_width=12) if i == 0 else Col(c, "text", min_width=12)
            if c in ("outliers", "last blocks") else Col(c) for i, c in enumerate(cols)]
    t = TextTable(spec, title=title, title_justify="left")
    for r in rows:
        t.add_row(*[str(x) if i == 0 else escape(str(x)) for i, x in enumerate(r)])
    return t


def render_analysis(res: TimelineAnalysis, con: Console, request=None) -> None:
    from mcp_server.timeline.export import outlier_blocks

    wide = con.width >= WIDE  # the CLI's --width (or the terminal's, 80 when piped)
    sm = "SM ids known" if res.sm_known else "SM ids unknown"
    print_line(con, f"[bold]{escape(res.source)}[/]: {res.nblocks} blocks x {res.ngroups} groups, tag layout "
               f"{res.tag_layout}{' (auto)' if res.tag_layout_auto else ''}, {sm}; {res.records} records, "
               f"{res.intervals} intervals, span {_fmt_ns(res.span_ns)}")
    print_warnings(con, res.warnings, highlight=False)
    if res.probe_overhead:
        po = res.probe_overhead
        how = f"medians of {po.samples}" if po.samples else "medians from the file"
        con.print(f"probe overhead: {po.overhead_pct:+.2f}% ({po.without_median_us:.1f} -> {po.with_median_us:.1f} us, "
                  f"{how}{', within noise' if po.within_noise else ''})")
    cols = ["phase", "occ", "wall", "slowest", "mean", "imbal", "CV", "skew", "wait after", "critical", "outliers",
            "last blocks"]
    in_view = cols if wide else ["phase", "occ", "wall", "imbal", "wait after", "critical", "outliers"]
    rows = []
    for p in res.phases:
        out = outlier_blocks(p)
        outl = ", ".join(map(str, out[:4])) + (f" +{len(out) - 4}" if len(out) > 4 else "") or "-"
        cells = dict(zip(cols, [p.name, len(p.occurrences), _fmt_ns(p.total_wall_ns), _fmt_ns(p.total_slowest_ns),
                                _fmt_ns(p.total_mean_ns), f"{p.imbalance:.2f}x", f"{p.cv_max:.2f}",
                                _fmt_ns(p.total_skew_ns), _fmt_ns(p.wait_after_mean_ns), _fmt_ns(p.critical_ns), outl,
                                ",".join(map(str, p.last_blocks[:6])) + ("…" if len(p.last_blocks) > 6 else "")
                                + (" (same)" if p.last_block_always_same and len(p.last_blocks) > 1 else "")]))
        rows.append([cells[c] for c in in_view])
    _table("Phases (totals over occurrences; outliers: blocks >= 1.2x the mean)", in_view, rows).print(con)
    if res.instants:
        _table("Instants", ["event", "count", "first", "last", "last block"],
                         [[i.name, i.count, _fmt_ns(i.first_ns), _fmt_ns(i.last_ns), i.last_block]
                          for i in res.instants]).print(con)
    if res.critical_path:
        cp = res.critical_path
        shown = cp if len(cp) <= 24 else cp[:12] + cp[-12:]
        _table(f"Critical path ({len(cp)} steps{', first and last 12 shown' if len(cp) > 24 else ''})",
                         ["phase", "occ", "last block", "end", "critical", "work", "release"],
                         [[s.phase, s.occurrence, s.last_block, _fmt_ns(s.end_ns), _fmt_ns(s.critical_ns),
                           _fmt_ns(s.work_ns), _fmt_ns(s.release_ns)] for s in shown]).print(con)
    con.print("[bold]Verdicts[/] (ranked by time at stake)")
    for i, v in enumerate(res.verdicts, 1):
        con.print(escape(f"{i}. [{v.kind}] {v.message}"), highlight=False)
    for k, path in res.outputs.items():
        print_line(con, f"wrote {k}: {escape(path)}")


def render_comparison(cmp: TimelineComparison, con: Console, request=None) -> None:
    wide = con.width >= WIDE
    print_line(con, f"[bold]before[/] {escape(cmp.before)}\n[bold]after[/]  {escape(cmp.after)}")
    print_warnings(con, cmp.warnings, highlight=False)
    rows = []
    for r in cmp.phases:
        b, a = r.before, r.after

        def pair(field, fmt=_fmt_ns, b=b, a=a):
            return f"{fmt(getattr(b, field)) if b else '-'} -> {fmt(getattr(a, field)) if a else '-'}"
        cells = [r.name, pair("critical_ns"), pair("imbalance", lambda x: f"{x:.2f}x"), pair("wait_ns")]
        if wide:
            cells += [pair(field) for field in ("wall_ns", "slowest_ns", "mean_ns", "skew_ns")]
        rows.append(cells)
    cols = ["phase", "critical", "imbalance", "waits"] + (["wall", "slowest", "mean", "skew"] if wide else [])
    _table("Phases before -> after (totals over occurrences)", cols, rows).print(con)
    con.print("[bold]Findings[/]")
    for f in cmp.findings:
        con.print(escape(f"- {f}"), highlight=False)
    for k, path in cmp.outputs.items():
        print_line(con, f"wrote {k}: {escape(path)}")
