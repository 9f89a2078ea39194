"""CLI view of a validation result (rich)."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mcp_server.validate.models import ValidationResult

_COLOURS = {"accepted": "green", "rejected": "red", "not_faster": "yellow", "error": "red"}


def _us(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def render(res: ValidationResult, con: Console, request: Any = None) -> None:
    colour = _COLOURS.get(res.verdict, "white")
    head = f"[bold {colour}]{res.verdict.upper()}[/]"
    if res.speedup and res.speedup.median is not None:
        s = res.speedup
        lo = "-" if s.ci_low is None else f"{s.ci_low:.4f}"
        hi = "-" if s.ci_high is None else f"{s.ci_high:.4f}"
        head += f"  speedup {s.median:.4f}x  [{lo}, {hi}] ({s.confidence:.0%})"
    head += f"  mode {res.mode}"
    if res.device:
        head += f"  on {escape(res.device.name)}"
    con.print(head, highlight=False)
    for r in res.reasons:
        con.print(f"  - {escape(r)}", highlight=False)
    c = res.correctness
    if c.checks:
        t = Table(title=f"Correctness ({c.shapes} shape(s) x {c.seeds} seeds; max abs err "
                        f"{c.max_abs_err if c.max_abs_err is not None else '-':.3g}, max rel err "
                        f"{c.max_rel_err if c.max_rel_err is not None else '-':.3g})"
                  if c.max_abs_err is not None and c.max_rel_err is not None
                  else f"Correctness ({c.shapes} shape(s) x {c.seeds} seeds)", title_justify="left")
        t.add_column("check")
        t.add_column("ok")
        t.add_column("detail")
        for ch in c.checks:
            t.add_row(ch.name, "[green]yes[/]" if ch.passed else f"[red]NO[/] ({ch.failures})", escape(ch.detail))
        con.print(t)
    if c.worst:
        t = Table(title="Worst elements", title_justify="left")
        for col in ("shape", "seed", "out", "index", "candidate", "reference", "abs err"):
            t.add_column(col)
        for w in c.worst:
            t.add_row(escape(str(w.shape)), str(w.seed), str(w.output), str(w.index), f"{w.candidate}",
                      f"{w.reference}", f"{w.abs_err}")
        con.print(t)
    tm = res.timing
    if tm:
        con.print(f"timing: {tm.cache} cache decides, {tm.method}, {tm.rounds} rounds ({tm.stop}, "
                  f"{tm.elapsed_s:.2f} s), calls per sample {tm.calls_per_sample}, input copies "
                  f"{tm.input_copies}", highlight=False)
        t = Table(title="Per shape (median per call, us)", title_justify="left")
        for col in ("shape", "baseline", "candidate", "speedup", "floor"):
            t.add_column(col, justify="left" if col == "shape" else "right")
        for ps in tm.per_shape:
            t.add_row(escape(str(ps.shape)), _us(ps.baseline_us.median), _us(ps.candidate_us.median),
                      f"{ps.speedup:.4f}", _us(ps.floor_us))
        t.add_row("all shapes", _us(tm.baseline_us.median), _us(tm.candidate_us.median),
                  f"{tm.baseline_us.median / tm.candidate_us.median:.4f}" if tm.candidate_us.median else "-", "")
        con.print(t)
        if tm.other_cache:
            o = tm.other_cache
            lo = "-" if o.speedup.ci_low is None else f"{o.speedup.ci_low:.4f}"
            hi = "-" if o.speedup.ci_high is None else f"{o.speedup.ci_high:.4f}"
            med = "-" if o.speedup.median is None else f"{o.speedup.median:.4f}"
            con.print(f"{o.cache} cache (reported, not deciding): speedup {med} [{lo}, {hi}] over {o.rounds} "
                      "rounds", highlight=False)
    if res.roofline and res.roofline.checked:
        con.print(f"roofline: {escape(res.roofline.detail)} ({escape(res.roofline.source or '')})", highlight=False)
    for p in res.patched:
        con.print(f"[red]patched[/] {escape(p.name)} by the {p.by} during {escape(p.stage)} (put back)",
                  highlight=False)
    for wn in res.warnings:
        con.print(f"[yellow]warning[/] {escape(wn.code)}: {escape(wn.message)}", highlight=False)
    if res.verdict == "error" and res.stderr_tail:
        con.print(escape(res.stderr_tail), highlight=False)
