"""CLI view of the loop (rich)."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from mcp_server.core.textable import print_line, print_warnings
from mcp_server.loop.models import LoopResult, speedup_text

_STYLE = {"accepted": "green", "reverted": "red", "abandoned": "yellow", "error": "red"}


def render_loop(res: LoopResult, console: Console, request: Any = None) -> None:
    head = "resumed" if res.resumed else "started"
    print_line(console, f"[bold]experiment {res.experiment_id}[/] ({head})  [dim]{escape(res.ledger)}[/]")
    if res.candidate:
        console.print(f"  selected kernel [bold]{escape(res.candidate)}[/]: {escape(res.diagnosis or '')}")
    for s in res.steps:
        sp = speedup_text(s.speedup)
        st = _STYLE.get(s.decision, "")
        again = " [dim](pending from an interrupted run)[/]" if s.resumed else ""
        console.print(f"  candidate {s.candidate_id} [bold]{escape(s.proposal_id)}[/]: [{st}]{s.decision}[/]"
                      f"{'  ' + s.verdict if s.verdict else ''}{escape(' ' + sp) if sp else ''}{again}")
        console.print(f"    [dim]{escape(s.why)}[/]")
    for k in res.skipped:
        console.print(f"  [dim]skipped {escape(k.proposal_id)}: {escape(k.reason)}[/]")
    errs = f", {res.errors} error(s)" if res.errors else ""
    console.print(f"  {res.accepted} accepted, {res.rejected} rejected{errs}; stopped: {res.stopped} "
                  f"({escape(res.stop_message)})")
    print_warnings(console, res.warnings, indent="  ")
