"""CLI views of the ledger operations (rich)."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mcp_server.ledger.models import LedgerExportResult, LedgerListResult, LedgerRecordResult, LedgerShowResult

_STATUS_STYLE = {"accepted": "green", "reverted": "red", "abandoned": "yellow", "error": "red", "pending": "magenta"}


def render_record(res: LedgerRecordResult, console: Console, request: Any = None) -> None:
    verb = "recorded" if res.created else "already recorded (same key)"
    extra = f", candidate {res.candidate_id}" if res.candidate_id is not None and res.kind != "candidate" else ""
    console.print(f"{res.kind} {res.id} {verb} in experiment {res.experiment_id}{extra}  [dim]{escape(res.ledger)}[/]")


def render_list(res: LedgerListResult, console: Console, request: Any = None) -> None:
    console.print(f"[bold]ledger[/] {escape(res.ledger)}  [dim]schema {res.schema_version}, "
                  f"{res.total} experiment(s)[/]")
    if not res.experiments:
        console.print("  [dim]no experiments yet[/]")
        return
    t = Table(show_edge=False)
    for col in ("id", "started", "target", "rev", "prof", "outcome"):
        t.add_column(col, overflow="fold")
    for e in res.experiments:
        rev = (e.git_rev or "")[:8] + ("*" if e.git_dirty else "")
        parts = [f"[green]{e.accepted} acc[/]", f"[red]{e.reverted} rev[/]", f"{e.abandoned} aband"]
        if e.error:
            parts.append(f"[red]{e.error} error[/]")
        if e.pending:
            parts.append(f"[magenta]{e.pending} pending[/]")
        t.add_row(str(e.id), e.created_at[5:16].replace("T", " "), escape(" ".join(e.target))[:48], rev,
                  str(e.profiles), f"{e.candidates} cand: " + ", ".join(parts))
    console.print(t)
    if any(e.git_dirty for e in res.experiments):
        console.print("  [dim]* uncommitted changes in the target's repository when it started[/]")


def render_show(res: LedgerShowResult, console: Console, request: Any = None) -> None:
    e = res.experiment
    console.print(f"[bold]experiment {e.id}[/] {escape(' '.join(e.target))}")
    console.print(f"  started {e.created_at}  repo {escape(str(e.repo))} @ {(e.git_rev or '?')[:12]}"
                  + (" [yellow](dirty)[/]" if e.git_dirty else ""))
    console.print(f"  GPU {escape(str(e.env.get('gpu')))}  driver {escape(str(e.env.get('driver')))}  torch "
                  f"{e.env.get('torch')}  triton {e.env.get('triton')}  ncu {escape(str(e.env.get('ncu')))}")
    for p in res.profiles:
        console.print(f"  profile {p.id}: {escape(str(p.report_path))}  [dim]{(p.report_sha256 or '')[:12]}[/]")
    if not res.candidates:
        console.print("  [dim]no candidates yet[/]")
        return
    for v in res.candidates:
        c = v.candidate
        val = v.validations[-1] if v.validations else None
        sp = (val.result or {}).get("speedup") if val and isinstance(val.result, dict) else None
        sp_s = ""
        if isinstance(sp, dict) and isinstance(sp.get("median"), (int, float)):
            sp_s = f"{sp['median']:.3f}x"
            if isinstance(sp.get("ci_low"), (int, float)) and isinstance(sp.get("ci_high"), (int, float)):
                sp_s += f" [{sp['ci_low']:.3f}, {sp['ci_high']:.3f}]"
        style = _STATUS_STYLE.get(v.status, "")
        console.print(f"  candidate {c.id} [bold]{escape(str(c.proposal_id or ''))}[/] on "
                      f"{escape(str(c.kernel or '?'))}: [{style}]{v.status}[/]"
                      + (f"  {val.verdict} {escape(sp_s)}" if val else ""))
        if v.decisions:
            d = v.decisions[-1]
            console.print(f"    [dim]by {escape(d.by)}: {escape(d.why)}[/]")


def render_export(res: LedgerExportResult, console: Console, request: Any = None) -> None:
    if res.output:
        console.print(f"{res.experiments} experiment(s) exported as {res.format} to {escape(res.output)}")
    else:
        console.print(res.text or "", markup=False, highlight=False, soft_wrap=True, end="")
