"""Rich rendering of a ReferenceResult for the CLI."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from mcp_server.core.textable import Col, TextTable, print_warnings
from mcp_server.refs.models import ReferenceResult

_READING = {
    "upstream_pr": "upstream PR exists: cherry-pick or port it",
    "local_hit": "already in a local checkout: likely a dispatch / wiring issue",
    "jira_ticket": "a Jira ticket exists: coordinate with its owner",
    "nothing_found": "every source answered, nothing found: new work",
    "unknown": "nothing found, but some sources did not answer: not conclusive",
}


def render_references(res: ReferenceResult, console: Console) -> None:
    cat = f"  category {res.category} ({res.category_source})" if res.category else ""
    console.print(f"[bold]references for[/] {escape(res.keyword)}{escape(cat)}  [dim]{res.elapsed_s:.2f}s[/]")
    for o in res.outcomes:
        console.print(f"  -> {escape(_READING.get(o, o))}")
    if res.unanswered:
        console.print(f"  [yellow]no live answer from[/] {escape(', '.join(res.unanswered))}")
    for sec in res.sections:
        tag = "green" if not sec.degraded else ("yellow" if sec.method not in ("url-only", "unavailable") else "red")
        head = f"\n[bold]{escape(sec.source)}[/] [{tag}]{sec.method}[/]"
        if sec.cached:
            head += " [dim](cached)[/]"
        if sec.total is not None:
            head += f" [dim]{len(sec.items)} of {sec.total}[/]"
        console.print(head)
        if sec.reason:
            console.print(f"  [dim]{escape(sec.reason)}[/]")
        if sec.root:
            console.print(f"  [dim]checkout {escape(sec.root)}[/]")
        if sec.items:
            # ids, dates and links whole; file names shortened from the middle; titles and snippets wrapped
            t = TextTable([Col("id", "name", justify="left", min_width=24), Col("state", justify="left"),
                           Col("title", "text", min_width=24), Col("link", justify="left")],
                          show_header=False, box=None, padding=(0, 1, 0, 0))
            for it in sec.items:
                if it.kind == "commit":
                    t.add_row((it.commit or "")[:12], escape((it.updated or "")[:10]),
                              escape(it.subject or ""), f"[dim]{escape(it.match or '')}[/]")
                elif it.kind == "file":
                    t.add_row(f"{it.file}:{it.line}", "", escape(it.snippet or ""), "")
                else:
                    t.add_row(it.id or "", escape(it.state or ""), escape(it.title or ""),
                              f"[dim]{escape(it.url or '')}[/]")
            t.print(console)
        elif sec.method not in ("url-only", "unavailable"):
            console.print("  [dim]no hits[/]")
        if sec.url and (sec.method == "url-only" or not sec.items):
            console.print(f"  search by hand: {escape(sec.url)}")
    print_warnings(console, res.warnings)
