"""Text faces of make_repro and run_repro."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from mcp_server.core.kernel_names import display_kernel_name
from mcp_server.core.textable import Col, TextTable, print_line, print_warnings
from mcp_server.repro.models import MakeReproResult, RunReproResult


def render_make(res: MakeReproResult, console: Console, request: object = None) -> None:
    c = console
    print_warnings(c, res.warnings)
    print_line(c, f"{escape(res.trace)}: {escape(res.scope)}; {res.selected_kernel_us:,.1f} us of kernels, "
               f"{res.coverage_pct:.1f} % rebuilt in {len(res.ops)} op signature(s)")
    # numbers and ids whole, op and module names shortened from the middle (textable.py)
    t = TextTable([Col("id", justify="left"), Col("op", "name", min_width=16), Col("calls"), Col("us/call"),
                   Col("share"), Col("module", "name", min_width=12)],
                  title="rebuilt (slowest first)", title_justify="left")
    for o in res.ops:
        t.add_row(escape(o.id), o.name, f"{o.calls}", f"{o.per_call_us:,.2f}", f"{o.share_pct:.1f}%",
                  o.module_type or "-")
    t.print(c)
    if res.not_rebuilt:
        c.print("[bold]not rebuilt[/]")
        for o in res.not_rebuilt[:10]:
            k = display_kernel_name(o.kernels[0].name) if o.kernels else ""
            c.print(f"  {escape(o.name)} {o.kernel_us:,.1f} us ({o.share_pct:.1f}%) {escape(k[:60])}: "
                    f"{escape(o.reason)}")
    print_line(c, f"wrote {escape(res.output_dir)}: " + ", ".join(escape(f.rsplit('/', 1)[-1]) for f in res.files[:6])
            + (" ..." if len(res.files) > 6 else ""))
    if res.spec:
        c.print(f"next: `python {escape(res.output_dir)}/repro.py` (GPU) or `kernelscope repro run "
                f"{escape(res.output_dir)}`; validate a candidate against {escape(res.spec)}")


def render_run(res: RunReproResult, console: Console, request: object = None) -> None:
    c = console
    print_warnings(c, res.warnings)
    t = TextTable([Col("id", justify="left"), Col("op", "name", min_width=16), Col("trace"), Col("kernel"),
                   Col("kernel cold"), Col("wall"), Col("wall cold"), Col("ratio")],
                  title=f"replay on {escape(res.device)} vs trace (us per call)", title_justify="left")

    def f(x: object) -> str:
        return f"{x:,.2f}" if isinstance(x, (int, float)) else "-"

    for o in res.ops:
        ratio = (f"{o.ratio:.2f}x" + (f" / {o.ratio_cold:.2f}x" if o.ratio_cold else "")) if o.ratio else ""
        t.add_row(escape(o.id), o.name, f(o.trace_us), f(o.replay_kernel_us), f(o.replay_kernel_cold_us),
                  f(o.replay_warm_us), f(o.replay_cold_us), ratio or escape(o.error[:30]) or "-")
    t.print(c)
    c.print(f"{res.within_band_pct:.1f} % of the replayed trace time is within 20 % of the trace (warm or cold; "
            "ratio = warm / cold kernel time over the trace's)")
