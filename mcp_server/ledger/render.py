"""CLI views of the ledger operations (rich)."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from mcp_server.core.textable import Col, TextTable, print_line
from mcp_server.ledger.models import LedgerExportResult, LedgerListResult, LedgerRecordResult, LedgerShowResult

_STATUS_STYLE = {"accepted": "green", "reverted": "red", "abandoned": "yellow", "error": "red", "pending": "magenta"}


def target_label(target: list[str]) -> str:
    """A target argument list as a table shows it: paths by their file name (``/opt/venv/bin/python3
    /w/mla_target.py --layers 16`` -> ``python3 mla_target.py --layers 16``); the table then shortens
    it from the middle, so the arguments at the end that tell experiments apart stay."""
    import os

    return " ".join(os.path.basename(a.rstrip("/")) or a if "/" in a and not a.startswith("-") else a
                    for a in target)


def render_record(res: LedgerRecordResult, console: Console, request: Any = None) -> None:
    verb = "recorded" if res.created else "already recorded (same key)"
    extra = f", candidate {res.candidate_id}" if res.candidate_id is not None and res.kind != "candidate" else ""
    print_line(console, f"{res.kind} {res.id} {verb} in experiment {res.experiment_id}{extra}  "
                        f"[dim]{escape(res.ledger)}[/]")


def render_list(res: LedgerListResult, console: Console, request: Any = None) -> None:
    print_line(console, f"[bold]ledger[/] {escape(res.ledger)}  [dim]schema {res.schema_version}, "
                  f"{res.total} experiment(s)[/]")
    if not res.experiments:
        console.print("  [dim]no experiments yet[/]")
        return
    t = TextTable([Col("id"), Col("started", justify="left"), Col("target", "name", min_width=24),
                   Col("rev", justify="left"), Col("prof"), Col("outcome", "text", min_width=16)])
    for e in res.experiments:
        rev = (e.git_rev or "")[:8] + ("*" if e.git_dirty else "")
        parts = [f"[green]{e.accepted} acc[/]", f"[red]{e.reverted} rev[/]", f"{e.abandoned} aband"]
        if e.error:
            parts.append(f"[red]{e.error} error[/]")
        if e.pending:
            parts.append(f"[magenta]{e.pending} pending[/]")
        t.add_row(str(e.id), e.created_at[5:16].replace("T", " "), target_label(e.target), rev,
                  str(e.profiles), f"{e.candidates} cand: " + ", ".join(parts))
    t.print(console)
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
        print_line(console, f"  profile {p.id}: {escape(str(p.report_path))}  [dim]{(p.report_sha256 or '')[:12]}[/]")
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
        # the decision, then what the validation said only where it adds to it (not "accepted  accepted")
        said = ""
        if val is not None:
            said = f" (validation: {val.verdict})" if val.verdict != v.status else ""
            said += f", speedup {escape(sp_s)}" if sp_s else ""
        console.print(f"  candidate {c.id} [bold]{escape(str(c.proposal_id or ''))}[/] on "
                      f"{escape(str(c.kernel or '?'))}: [{style}]{v.status}[/]{said}")
        if v.decisions:
            d = v.decisions[-1]
            console.print(f"    [dim]by {escape(d.by)}: {escape(d.why)}[/]")


def render_export(res: LedgerExportResult, console: Console, request: Any = None) -> None:
    if res.output:
        print_line(console, f"{res.experiments} experiment(s) exported as {res.format} to {escape(res.output)}")
    else:
        console.print(res.text or "", markup=False, highlight=False, soft_wrap=True, end="")
