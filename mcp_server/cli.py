"""The ``kernelscope`` command: argparse and rich faces over the engines.

Every verb calls one engine function; ``--json`` prints exactly the MCP tool's
structured result (``model_dump(mode="json")``). Errors print one line to
stderr and exit with status 2. Progress goes to stderr, so stdout stays clean
for ``--json``.

Sections are grouped by engine; a verb adds ``_add_<verb>(sub)`` to its section
and one entry to ``VERBS``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mcp_server import __version__
from mcp_server.errors import KernelscopeError

out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)

ProgressFn = Callable[[float, "float | None", "str | None"], None]


# --------------------------------------------------------------------------- shared helpers


def emit_json(model: Any) -> None:
    """Print the tool-identical JSON of a result model."""
    data = model.model_dump(mode="json") if hasattr(model, "model_dump") else model
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def show(args: argparse.Namespace, res: Any, render: Callable[..., None], **kw: Any) -> int:
    """``--json``: the tool-identical JSON; otherwise the rich rendering. Returns exit status 0."""
    if args.json:
        emit_json(res)
    else:
        render(res, out, **kw)
    return 0


@contextlib.contextmanager
def progress_bar(description: str) -> Iterator[ProgressFn]:
    """A rich progress bar on stderr; yields the engine's ``progress`` callback."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    if not err.is_terminal:
        yield lambda done, total=None, message=None: None
        return
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[msg]}"),
        TimeElapsedColumn(), console=err, transient=True,
    ) as prog:
        task = prog.add_task(description, total=None, msg="")

        def cb(done: float, total: float | None = None, message: str | None = None) -> None:
            prog.update(task, completed=done, total=total, msg=message or "")

        yield cb


def simple_table(title: str, columns: list[str], rows: list[list[Any]], *, right: set[int] | None = None) -> Table:
    t = Table(title=title, title_justify="left", show_lines=False)
    right = right if right is not None else set(range(1, len(columns)))
    for i, c in enumerate(columns):
        t.add_column(c, justify="right" if i in right else "left")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t


# --------------------------------------------------------------------------- serve


def _add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the MCP server on stdio")
    p.set_defaults(func=lambda a: _serve())


def _serve() -> int:
    from mcp_server.server import main as serve_main

    serve_main()
    return 0


# --------------------------------------------------------------------------- traces


def _add_analyze(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze", help="attribute a trace's GPU kernels to nn.Modules; summary, --json or an xlsx report",
        description="Analyze a PyTorch-profiler (Kineto) trace: every GPU kernel attributed to its nn.Module, "
        "category and phase; CUDA-graph replays attributed from eager kernels.",
    )
    p.add_argument("trace", help="Kineto trace (.json or .json.gz)")
    p.add_argument("-o", "--output", dest="output_xlsx", help="write the xlsx report here")
    p.add_argument("--categories", help="categories CSV (default _shared/kernel_categories.csv)")
    p.add_argument("--reference-trace", help="eager trace of the same model, to attribute CUDA-graph replays")
    p.add_argument("--json", action="store_true", help="print the typed result as JSON")
    p.set_defaults(func=_run_analyze)


def _run_analyze(a: argparse.Namespace) -> int:
    from mcp_server.traces import analyze_trace
    from mcp_server.traces.render import render_analysis

    with progress_bar("analyze") as cb:
        res = analyze_trace(
            a.trace, output_xlsx=a.output_xlsx, categories=a.categories,
            reference_trace=a.reference_trace, progress=cb,
        )
    return show(a, res, render_analysis)


# --------------------------------------------------------------------------- compare


def _add_recategorize(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recategorize", help="re-apply the kernel categories CSV to xlsx reports (in place, atomic)",
        description="Re-classify every kernel of report workbooks (kernelscope or trace_module_analyzer, both "
        "layouts): Category columns, category tables, Module Tree breakdowns. Idempotent.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="report workbook(s) (.xlsx)")
    p.add_argument("--categories", help="categories CSV (default _shared/kernel_categories.csv)")
    p.add_argument("--output-dir", help="write updated copies here instead of editing in place")
    p.add_argument("--json", action="store_true", help="print the typed result as JSON")
    p.set_defaults(func=_run_recategorize)


def _run_recategorize(a: argparse.Namespace) -> int:
    from mcp_server.compare.recategorize import recategorize

    res = recategorize(a.files, categories=a.categories, output_dir=a.output_dir)
    if a.json:
        emit_json(res)
        return 0
    rows = [[f.output, f.source, f.changed, f.rows_changed, len(f.sheets_updated)] for f in res.files]
    out.print(simple_table(f"recategorize ({res.categories_source})", ["report", "layout", "kernels changed",
                                                                        "cells", "sheets"], rows, right={2, 3, 4}))
    for f in res.files:
        for c in f.changes[:20]:
            out.print(f"  {escape(c.kernel[:100])}: {escape(c.old)} -> {escape(c.new)}", markup=False)
        if len(f.changes) > 20:
            out.print(f"  ... {len(f.changes) - 20} more (--json lists all)")
        for w in f.warnings:
            err.print(f"warning: {escape(w.message)}")
    return 0


def _add_budget(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "budget", help="per-category time of two runs side by side (works on CUDA-graph decode)",
        description="Per kernel category: each side's time and share, gap (B - A) and ratio, sorted by |gap|. "
        "Inputs: traces (.json/.json.gz) or reports (.xlsx, kernelscope or torch-profiler-parser).",
    )
    p.add_argument("a", help="side A: trace or report")
    p.add_argument("b", help="side B: trace or report")
    p.add_argument("--labels", nargs=2, metavar=("LA", "LB"), help="labels for A and B (default: file names)")
    p.add_argument("--phase", choices=["prefill", "decode"], help="keep only this phase's kernels")
    p.add_argument("--categories", help="categories CSV (default _shared/kernel_categories.csv)")
    p.add_argument("--json", action="store_true", help="print the typed result as JSON")
    p.set_defaults(func=_run_budget)


def _run_budget(a: argparse.Namespace) -> int:
    from mcp_server.compare.budget import budget
    from mcp_server.compare.render import render_budget

    with progress_bar("budget"):
        res = budget(a.a, a.b, labels=a.labels, phase=a.phase, categories=a.categories)
    return show(a, res, render_budget)


def _add_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare", help="module-by-module comparison of two runs (diff_modules): panels, --json, xlsx, HTML",
        description="Group each run's kernels into functional blocks (_shared/functional_blocks.csv), align the "
        "kernels of each block across the runs and annotate FUSION / IMPROVE / MISSING; blocks sorted by |gap|.",
    )
    p.add_argument("a", help="side A: trace or report")
    p.add_argument("b", help="side B: trace or report")
    p.add_argument("--labels", nargs=2, metavar=("LA", "LB"), help="labels for A and B (default: file names)")
    p.add_argument("--phase", choices=["prefill", "decode"], help="keep only this phase's kernels")
    p.add_argument("--categories", help="categories CSV (default _shared/kernel_categories.csv)")
    p.add_argument("--blocks", help="functional blocks CSV (default _shared/functional_blocks.csv)")
    p.add_argument("--reference-a", help="eager trace of A's model: attributes A's CUDA-graph replays (decode)")
    p.add_argument("--reference-b", help="eager trace of B's model: attributes B's CUDA-graph replays (decode)")
    p.add_argument("-o", "--output", dest="output_xlsx", help="write the diff workbook (.xlsx) here")
    p.add_argument("--html", dest="output_html", help="write a self-contained HTML report here")
    p.add_argument("--panels", type=int, default=6, help="block panels to print (default 6)")
    p.add_argument("--json", action="store_true", help="print the typed result as JSON")
    p.set_defaults(func=_run_compare)


def _run_compare(a: argparse.Namespace) -> int:
    from mcp_server.compare.diff import diff_modules
    from mcp_server.compare.render import render_diff

    with progress_bar("compare"):
        res = diff_modules(a.a, a.b, labels=a.labels, phase=a.phase, categories=a.categories, blocks=a.blocks,
                           output_xlsx=a.output_xlsx, output_html=a.output_html,
                           reference_a=a.reference_a, reference_b=a.reference_b)
    return show(a, res, render_diff, panels=a.panels)


# --------------------------------------------------------------------------- refs


def _add_refs(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "refs", help="find prior art for a kernel/op keyword: upstream PRs, local checkouts, Jira",
        description="Search the sources of _shared/data-sources.md (GitHub PRs via gh or REST, local git "
        "checkouts, Jira) for a kernel or op keyword, all at once within one time bound. Each section says "
        "how it was obtained (live:gh, live:rest, live:jira, local:git, url-only) and why when degraded.",
    )
    p.add_argument("keyword", help="kernel or op keyword, e.g. moe_sorting, ck_gemm, rmsnorm, mla")
    p.add_argument("--category", help="kernel category (hits mentioning it first); default: classified from the keyword")
    p.add_argument("--sources", nargs="+", metavar="KEY", help="registry keys to search (default: every enabled source)")
    p.add_argument("--max", dest="max_results", type=int, default=10, help="hits per source (1-100, default 10)")
    p.add_argument("--days", type=int, help="only work updated in the last N days")
    p.add_argument("--timeout", type=float, default=20.0, help="bound on the whole call in seconds (default 20)")
    p.add_argument("--no-cache", action="store_true", help="ignore and do not write the on-disk cache")
    p.add_argument("--registry", help="reference-source registry (default _shared/data-sources.md)")
    p.add_argument("--json", action="store_true", help="print the typed result as JSON")
    p.set_defaults(func=_run_refs)


def _run_refs(a: argparse.Namespace) -> int:
    from mcp_server.refs import find_references
    from mcp_server.refs.render import render_references

    res = find_references(
        a.keyword, category=a.category, sources=a.sources, max_results=a.max_results, days=a.days,
        timeout_s=a.timeout, no_cache=a.no_cache, registry=a.registry,
    )
    return show(a, res, render_references)


# --------------------------------------------------------------------------- timeline


def _add_timeline(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "timeline", help="decode in-kernel probe buffers: phases, imbalance, critical path; compare before/after",
        description="Decode probe buffers (FlashInfer profiler / kernelscope probe format) of persistent or "
        "multi-phase kernels and find the phase and block that set the critical path.",
    )
    tsub = p.add_subparsers(dest="timeline_verb", metavar="ACTION")
    tsub.required = True
    a = tsub.add_parser("analyze", help="analyze one probe buffer",
                        description="Per phase and occurrence: wall, slowest, mean, imbalance, skew, last block, "
                        "barrier waits; the critical path; verdicts ranked by time at stake.")
    a.add_argument("buffer", help="probe buffer: raw little-endian uint64 (.bin) or .npy")
    a.add_argument("--events", help="event names in event-id order: N1,N2,... or a file (one per line); "
                   "default <buffer stem>.events beside the buffer")
    a.add_argument("--tag-layout", choices=["legacy", "sm"], help="override the auto-detected tag layout")
    a.add_argument("--overhead", help="JSON of kernel times with/without probes (default <buffer stem>.overhead.json)")
    a.add_argument("--perfetto", metavar="OUT.json", help="write a Perfetto/Chrome trace JSON")
    a.add_argument("--png", metavar="OUT.png", help="write a Gantt chart PNG")
    a.add_argument("--json", action="store_true", help="print the typed result as JSON")
    a.set_defaults(func=_run_timeline_analyze)
    c = tsub.add_parser("compare", help="compare two probe buffers of the same kernel (before/after)")
    c.add_argument("before", help="probe buffer before the change")
    c.add_argument("after", help="probe buffer after the change")
    c.add_argument("--events", help="event names for both buffers: N1,N2,... or a file")
    c.add_argument("--tag-layout", choices=["legacy", "sm"], help="override the auto-detected tag layout")
    c.add_argument("--json", action="store_true", help="print the typed result as JSON")
    c.set_defaults(func=_run_timeline_compare)


def _run_timeline_analyze(a: argparse.Namespace) -> int:
    from mcp_server.timeline.analysis import analyze_timeline
    from mcp_server.timeline.render import render_analysis

    with progress_bar("timeline") as cb:
        res = analyze_timeline(a.buffer, a.events, tag_layout=a.tag_layout, overhead_path=a.overhead,
                               perfetto_path=a.perfetto, png_path=a.png, progress=cb)
    return show(a, res, render_analysis)


def _run_timeline_compare(a: argparse.Namespace) -> int:
    from mcp_server.timeline.compare import compare_timelines
    from mcp_server.timeline.render import render_comparison

    with progress_bar("timeline compare") as cb:
        res = compare_timelines(a.before, a.after, a.events, tag_layout=a.tag_layout, progress=cb)
    return show(a, res, render_comparison)



# --------------------------------------------------------------------------- main

VERBS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_serve,
    _add_analyze,
    _add_recategorize,
    _add_budget,
    _add_compare,
    _add_refs,
    _add_timeline,
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kernelscope",
        description="GPU kernel performance tooling for LLM inference (MCP server, CLI, skills).",
    )
    p.add_argument("--version", action="version", version=f"kernelscope {__version__}")
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for add in VERBS:
        add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KernelscopeError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except BrokenPipeError:
        return 0


def entry() -> None:  # pragma: no cover - console script shim
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
