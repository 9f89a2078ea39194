"""CLI view of a validation result (rich)."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from mcp_server.core.textable import Col, TextTable, print_line, print_warnings
from mcp_server.validate.harness.tensors import shape_str
from mcp_server.validate.models import ValidationResult

_COLOURS = {"accepted": "green", "rejected": "red", "not_faster": "yellow", "error": "red"}


def _us(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def _f4(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def _g(x: Any) -> str:
    """A number whole but short (6 significant digits): never cut by the table."""
    return f"{x:.6g}" if isinstance(x, float) else "-" if x is None else str(x)


def render(res: ValidationResult, con: Console, request: Any = None) -> None:
    colour = _COLOURS.get(res.verdict, "white")
    head = f"[bold {colour}]{res.verdict.upper()}[/]"
    if res.speedup and res.speedup.median is not None:
        s = res.speedup
        head += f"  speedup {s.median:.4f}x  [{_f4(s.ci_low)}, {_f4(s.ci_high)}] ({s.confidence:.0%})"
    head += f"  mode {res.mode}"
    if res.device:
        head += f"  on {escape(res.device.name)}"
    con.print(head, highlight=False)
    for r in res.reasons:
        con.print(f"  - {escape(r)}", highlight=False)
    c = res.correctness
    if c.checks:
        title = (f"Correctness ({c.shapes} shape(s) x {c.seeds} seeds; max abs err {c.max_abs_err:.3g}, max rel err "
                 f"{c.max_rel_err:.3g})" if c.max_abs_err is not None and c.max_rel_err is not None
                 else f"Correctness ({c.shapes} shape(s) x {c.seeds} seeds)")
        t = TextTable([Col("check", "name", min_width=20), Col("ok", justify="left"), Col("detail", "text")],
                      title=title, title_justify="left")
        for ch in c.checks:
            t.add_row(ch.name, "[green]yes[/]" if ch.passed else f"[red]NO[/] ({ch.failures})", escape(ch.detail))
        t.print(con)
    if c.worst:
        t = TextTable([Col("shape", "text", min_width=12), Col("seed"), Col("out"), Col("index"), Col("candidate"),
                       Col("reference"), Col("abs err")], title="Worst elements", title_justify="left")
        for w in c.worst:
            t.add_row(escape(shape_str(w.shape)), str(w.seed), str(w.output), escape(str(w.index)), _g(w.candidate),
                      _g(w.reference), _g(w.abs_err))
        t.print(con)
    tm = res.timing
    if tm:
        con.print(f"timing: {tm.cache} cache decides, {tm.method}, {tm.rounds} rounds ({tm.stop}, "
                  f"{tm.elapsed_s:.2f} s), calls per sample {tm.calls_per_sample}, input copies "
                  f"{tm.input_copies}", highlight=False)
        t = TextTable([Col("shape", "text", min_width=12), Col("baseline"), Col("candidate"), Col("speedup"),
                       Col("floor")], title="Per shape (median per call, us)", title_justify="left")
        for ps in tm.per_shape:
            t.add_row(escape(shape_str(ps.shape)), _us(ps.baseline_us.median), _us(ps.candidate_us.median),
                      f"{ps.speedup:.4f}", _us(ps.floor_us))
        t.add_section()
        sp = res.speedup.median if res.speedup is not None else None
        if len(tm.per_shape) > 1:  # the deciding speedup: the summed per-shape medians (stats.summed_medians_ci)
            base = sum(ps.baseline_us.median for ps in tm.per_shape)
            cand = sum(ps.candidate_us.median for ps in tm.per_shape)
            t.add_row("all shapes (sum; decides)", _us(base), _us(cand), _f4(sp), "")
        t.print(con)
        if tm.other_cache:
            o, osp = tm.other_cache, tm.other_cache.speedup
            con.print(f"{o.cache} cache (reported, not deciding): speedup {_f4(osp.median)} [{_f4(osp.ci_low)}, "
                      f"{_f4(osp.ci_high)}] over {o.rounds} rounds", highlight=False)
    if res.roofline and res.roofline.checked:
        print_line(con, f"roofline: {escape(res.roofline.detail)} ({escape(res.roofline.source or '')})")
    for p in res.patched:
        con.print(f"[red]patched[/] {escape(p.name)} by the {p.by} during {escape(p.stage)} (put back)",
                  highlight=False)
    print_warnings(con, res.warnings, highlight=False)
    if res.verdict == "error" and res.stderr_tail:
        con.print(escape(res.stderr_tail), highlight=False)
