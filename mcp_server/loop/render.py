"""CLI view of the loop (rich)."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mcp_server.loop.models import LoopResult

_STYLE = {"accepted": "green", "reverted": "red", "abandoned": "yellow"}


def render_loop(res: LoopResult, console: Console, request: Any = None) -> None:
    head = "resumed" if res.resumed else "started"
    console.print(f"[bold]experiment {res.experiment_id}[/] ({head})  [dim]{escape(res.ledger)}[/]")
    if res.candidate:
        console.print(f"  candidate [bold]{escape(res.candidate)}[/]: {escape(res.diagnosis or '')}")
    if res.steps:
        t = Table(show_edge=False)
        for col in ("cand", "proposal", "verdict", "speedup [CI]", "decision", "why"):
            t.add_column(col)
        for s in res.steps:
            sp = s.speedup or {}
            sp_s = ""
            if isinstance(sp.get("median"), (int, float)):
                sp_s = f"{sp['median']:.3f}x"
                if isinstance(sp.get("ci_low"), (int, float)) and isinstance(sp.get("ci_high"), (int, float)):
                    sp_s += f" [{sp['ci_low']:.3f}, {sp['ci_high']:.3f}]"
            st = _STYLE.get(s.decision, "")
            t.add_row(str(s.candidate_id) + ("*" if s.resumed else ""), escape(s.proposal_id), s.verdict or "",
                      escape(sp_s), f"[{st}]{s.decision}[/]", escape(s.why)[:70])
        console.print(t)
        if any(s.resumed for s in res.steps):
            console.print("  [dim]* pending from an interrupted run, finished now[/]")
    for k in res.skipped:
        console.print(f"  [dim]skipped {escape(k.proposal_id)}: {escape(k.reason)}[/]")
    console.print(f"  {res.accepted} accepted, {res.rejected} rejected; stopped: {res.stopped} "
                  f"({escape(res.stop_message)})")
    for w in res.warnings:
        console.print(f"  [yellow]warning[/] {w.code}: {escape(w.message)}")
