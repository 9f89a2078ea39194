"""Text faces of make_repro and run_repro."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mcp_server.kernel_names import display_kernel_name
from mcp_server.repro.models import MakeReproResult, RunReproResult


def _warnings(c: Console, warnings: list) -> None:
    for w in warnings:
        c.print(f"[yellow]warning[/] {escape(w.code)}: {escape(w.message)}")


def render_make(res: MakeReproResult, console: Console, request: object = None) -> None:
    c = console
    _warnings(c, res.warnings)
    c.print(f"{escape(res.trace)}: {escape(res.scope)}; {res.selected_kernel_us:,.1f} us of kernels, "
            f"{res.coverage_pct:.1f} % rebuilt in {len(res.ops)} op signature(s)")
    t = Table(box=box.SIMPLE_HEAD, title="rebuilt (slowest first)", title_justify="left")
    for col in ("id", "op", "calls", "us/call", "share", "module"):
        folds = col in ("op", "module")
        t.add_column(col, no_wrap=not folds, overflow="fold" if folds else "ellipsis",
                     justify="right" if col in ("calls", "us/call", "share") else "left")
    for o in res.ops:
        t.add_row(o.id, escape(o.name), f"{o.calls}", f"{o.per_call_us:,.2f}", f"{o.share_pct:.1f}%",
                  escape(o.module_type or "-"))
    c.print(t)
    if res.not_rebuilt:
        c.print("[bold]not rebuilt[/]")
        for o in res.not_rebuilt[:10]:
            k = display_kernel_name(o.kernels[0].name) if o.kernels else ""
            c.print(f"  {escape(o.name)} {o.kernel_us:,.1f} us ({o.share_pct:.1f}%) {escape(k[:60])}: "
                    f"{escape(o.reason)}")
    c.print(f"wrote {escape(res.output_dir)}: " + ", ".join(escape(f.rsplit('/', 1)[-1]) for f in res.files[:6])
            + (" ..." if len(res.files) > 6 else ""))
    if res.spec:
        c.print(f"next: `python {escape(res.output_dir)}/repro.py` (GPU) or `kernelscope repro run "
                f"{escape(res.output_dir)}`; validate a candidate against {escape(res.spec)}")


def render_run(res: RunReproResult, console: Console, request: object = None) -> None:
    c = console
    _warnings(c, res.warnings)
    t = Table(box=box.SIMPLE_HEAD, title=f"replay on {escape(res.device)} vs trace (us per call)",
              title_justify="left")
    for col in ("id", "op", "trace", "replay", "warm", "cold", "ratio"):
        t.add_column(col, justify="left" if col in ("id", "op") else "right", no_wrap=col != "op",
                     overflow="fold")

    def f(x: object) -> str:
        return f"{x:,.2f}" if isinstance(x, (int, float)) else "-"

    for o in res.ops:
        t.add_row(o.id, escape(o.name), f(o.trace_us), f(o.replay_kernel_us), f(o.replay_warm_us),
                  f(o.replay_cold_us), (f"{o.ratio:.2f}x" if o.ratio else escape(o.error[:30]) or "-"))
    c.print(t)
    c.print(f"{res.within_band_pct:.1f} % of the replayed trace time is within 20 % of the trace")
