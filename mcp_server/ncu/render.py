"""Human views of the ncu results: rich tables for the CLI, Markdown for select_candidate's report."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from rich.markup import escape

from mcp_server.core.textable import Col, TextTable, print_line, print_warnings
from mcp_server.ncu.models import Classification, ClassifiedKernel, NcuProfile, NcuRun, Selection


def _us(ns: Optional[float]) -> str:
    if ns is None:
        return "n/a"
    return f"{ns / 1e3:,.1f} us" if ns < 1e7 else f"{ns / 1e6:,.2f} ms"


def _num_us(ns: Optional[float]) -> str:
    """Microseconds without the unit (a column headed ``... us``)."""
    return "n/a" if ns is None else f"{ns / 1e3:,.1f}"


def _p(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def _unrecognized(res: Any, con) -> None:
    names = getattr(res, "unrecognized_metrics", None) or []
    if names:
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more (--json lists them)" if len(names) > 6 else "")
        con.print(escape(f"{len(names)} metric(s) the catalogue does not map (shown, not used): {shown}"),
                  highlight=False)


def _source_line(src) -> str:
    cc = src.cache_control or "unknown"
    return (f"{src.path} [{src.format}] ncu {src.ncu_version or '?'}, cache-control {cc}"
            f"{' (' + src.cache_control_from + ')' if src.cache_control_from else ''}, device {src.device or '?'}")


def render_profile(res: NcuProfile, con, request: Any = None) -> None:
    print_line(con, escape(_source_line(res.source)))
    t = TextTable([Col("id"), Col("kernel", "name", min_width=12), Col("nvtx", "name", min_width=8), Col("launches"),
                   Col("total us"), Col("median us"), Col("SM %"), Col("mem %"), Col("DRAM %"), Col("L2 hit %")],
                  title=f"{len(res.kernels)} kernels, {_us(res.total_duration_ns)} total", title_justify="left")
    for k in res.kernels:
        m = k.metrics
        t.add_row(str(k.id), k.short_name, k.nvtx or "", str(k.launches), _num_us(k.duration_ns.total),
                  _num_us(k.duration_ns.median), _p(m.get("sm_throughput_pct")), _p(m.get("memory_throughput_pct")),
                  _p(m.get("dram_throughput_pct")), _p(m.get("l2_hit_rate_pct")))
    t.print(con)
    _unrecognized(res, con)
    print_warnings(con, res.warnings, highlight=False)


def render_classification(res: Classification, con, request: Any = None) -> None:
    print_line(con, escape(_source_line(res.source)) + f", gpu {res.gpu or '?'}")
    t = TextTable([Col("id"), Col("kernel", "name", min_width=12), Col("share"), Col("class", justify="left"),
                   Col("limiter", justify="left"), Col("L2-resident"), Col("conf."), Col("SM %"), Col("mem %")],
                  title=f"{len(res.kernels)} kernels, {_us(res.total_duration_ns)} total", title_justify="left")
    for k in res.kernels:
        b = k.bottleneck
        res_s = "?" if b.l2_resident is None else ("yes" if b.l2_resident else "no")
        t.add_row(str(k.id), k.nvtx or k.short_name, f"{k.time_share:.1%}", escape(b.class_), escape(b.limiter or ""),
                  res_s, f"{b.confidence:.2f}", _p(k.metrics.get("sm_throughput_pct")),
                  _p(k.metrics.get("memory_throughput_pct")))
    t.print(con)
    for k in res.kernels[:3]:
        con.print(f"[bold]{escape(k.nvtx or k.short_name)}[/]: " + escape("; ".join(k.bottleneck.advice)),
                  highlight=False)
    _unrecognized(res, con)
    print_warnings(con, res.warnings, highlight=False)


def render_selection(res: Selection, con, request: Any = None) -> None:
    print_line(con, escape(_source_line(res.source)) + f", gpu {res.gpu or '?'}")
    k = res.candidate
    if k is None:
        con.print("[bold]no candidate[/]")
    else:
        b = k.bottleneck
        con.print(f"[bold]candidate[/]: {escape(k.short_name)} ({escape(k.nvtx or '')}) {k.time_share:.1%} of kernel "
                  f"time, {b.class_}/{b.limiter}, confidence {b.confidence:.2f}", highlight=False)
        for e in b.evidence:
            con.print(f"  - {escape(e.reads)}", highlight=False)
        con.print("[green]fits[/]: " + escape("; ".join(res.fits)), highlight=False)
        con.print("[red]does not fit[/]: " + escape("; ".join(res.does_not_fit)), highlight=False)
    for r in res.ranking:
        if r.why_not:
            label = f"{r.short_name} ({r.nvtx})" if r.nvtx else r.short_name
            con.print(f"  {escape(label)}: {escape(r.why_not)}", highlight=False)
    for p in (res.md_path, res.png_path):
        if p:
            con.print(f"wrote {escape(p)}", highlight=False)
    print_warnings(con, res.warnings, highlight=False)


def render_run(res: NcuRun, con, request: Any = None) -> None:
    print_line(con, f"{escape(res.report)}: {res.kernels_profiled} kernels profiled in {res.wall_s:.1f} s "
              f"(ncu {res.ncu_version or '?'}, cache-control {res.cache_control}, clock-control {res.clock_control}, "
              f"target rc {res.target_rc})", highlight=False)
    con.print(f"log {escape(res.log)}; sidecar {escape(res.sidecar)}", highlight=False)
    if res.replay:
        print_line(con, f"replayed {escape(res.replay)} alone, its NVTX range the kernel filter", highlight=False)
    if res.profile is not None:
        render_profile(res.profile, con)
    print_warnings(con, res.warnings, highlight=False)


def _md_kernel(k: ClassifiedKernel) -> list[str]:
    b = k.bottleneck
    lines = [f"- **class** `{b.class_}`, limiter `{b.limiter}`, L2-resident `{b.l2_resident}`, "
             f"confidence {b.confidence:.2f}",
             f"- {k.launches} launches, median {_us(k.duration_ns.median)}, total {_us(k.duration_ns.total)}, "
             f"{k.time_share:.1%} of kernel time; grid {k.grid}, block {k.block}, "
             f"{_p(k.registers_per_thread)} registers/thread"]
    lines += ["", "| metric | value | threshold | reads |", "|---|---|---|---|"]
    for e in b.evidence:
        lines.append(f"| `{e.metric}` | {_p(e.value)} | {_p(e.threshold)} | {e.reads} |")
    if b.missing:
        lines += ["", "Missing metrics: " + ", ".join(f"`{m}`" for m in b.missing)]
    lines += ["", "Advice:"] + [f"- {a}" for a in b.advice]
    return lines


def selection_markdown(sel: Selection) -> str:
    src = sel.source
    out = [f"# Candidate selection: {Path(src.path).name}", "",
           f"Source `{src.path}` ({src.format}, ncu {src.ncu_version or '?'}, cache-control "
           f"{src.cache_control or 'unknown'}), GPU `{sel.gpu or '?'}`, min share {sel.min_share:.0%}.", ""]
    k = sel.candidate
    if k is None:
        out += ["No candidate: no kernel reaches the share threshold with a known class.", ""]
    else:
        out += [f"## Candidate: `{k.short_name}`" + (f" ({k.nvtx})" if k.nvtx else ""), ""] + _md_kernel(k)
        out += ["", "### Changes that fit", ""] + [f"- {f}" for f in sel.fits]
        out += ["", "### Changes that do not fit", ""] + [f"- {f}" for f in sel.does_not_fit]
    out += ["", "## Ranking", "", "| kernel | share | headroom | score | class | limiter | why not |",
            "|---|---|---|---|---|---|---|"]
    for r in sel.ranking:
        label = f"`{r.short_name}`" + (f" ({r.nvtx})" if r.nvtx else "")
        out.append(f"| {label} | {r.time_share:.1%} | {r.headroom:.0%} | {r.score:.3f} | {r.bottleneck_class} "
                   f"| {r.limiter or ''} | {r.why_not or '**candidate**'} |")
    if sel.png_path:
        out += ["", f"![roofline]({Path(sel.png_path).name})"]
    if sel.warnings:
        out += ["", "## Warnings", ""] + [f"- `{w.code}`: {w.message}" for w in sel.warnings]
    return "\n".join(out) + "\n"


def write_markdown(sel: Selection, path: str) -> Path:
    from mcp_server.core.atomic import atomic_write_text, check_output_path

    target = check_output_path(path, "Markdown report")
    return atomic_write_text(target, selection_markdown(sel), "Markdown report")
