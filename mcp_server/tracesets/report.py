"""Files of a trace-set analysis: the summary workbook and the rank x module heat map (HTML).

The workbook holds one sheet per view across ranks (Ranks, Straggler, Layers,
Modules, Categories, and Collectives when the ranks ran any); each rank's own report is written beside it by that rank's
worker (``<stem>.rank<N>.xlsx``, the single-trace report layout). The HTML page is
self-contained: a rank x module table whose cells are coloured by the ratio to
the module's mean over ranks. Both written atomically.
"""
from __future__ import annotations

import html
import os
from pathlib import Path
from types import SimpleNamespace  # a rank's breakdown in the shape gpu_time_rows reads (it has no devices)
from typing import Any, Iterable

from mcp_server.core.atomic import atomic_write_text, check_output_path
from mcp_server.tracesets.models import TraceSetAnalysis

#: modules in the heat map (the largest by mean time; the workbook holds all)
HEAT_ROWS = 60


def _ranks(res: TraceSetAnalysis) -> list[int]:
    return sorted(r.rank for r in res.ranks)


def write_set_xlsx(res: TraceSetAnalysis, path: str | os.PathLike) -> Path:
    from openpyxl import Workbook
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.styles import Font

    from mcp_server.reports import atomic_save, gpu_time_rows
    from mcp_server.reports.layout import GPU_TIME, GPU_TIME_HEADERS

    out = check_output_path(path, "xlsx trace-set summary")
    ranks = _ranks(res)
    wb = Workbook(write_only=True)
    bold = Font(bold=True)

    def sheet(name: str, header: list[str], rows: Iterable[list[Any]]) -> None:
        ws = wb.create_sheet(name)
        cells = []
        for h in header:
            c = WriteOnlyCell(ws, value=h)
            c.font = bold
            cells.append(c)
        ws.append(cells)
        for row in rows:
            ws.append(row)

    per = [f"rank {r} (us)" for r in ranks]
    in_order = sorted(res.layers, key=lambda x: x.index)
    sheet("Ranks", ["Rank", "Total kernel (us)", "Kernels", "Vs mean", "Rank from", "Trace", "Rank report"],
          ([r.rank, round(r.total_kernel_us, 3), r.kernel_count, round(r.vs_mean, 4), r.rank_source, r.path,
            r.output_xlsx or ""] for r in sorted(res.ranks, key=lambda r: r.rank)))
    st = res.straggler
    sheet("Straggler", ["Field", "Value"], [["rank", st.rank], ["kind", st.kind or ""], ["evidence", st.evidence],
                                           ["threshold", res.imbalance_threshold], ["layers from", res.layer_source],
                                           *([f"layer {k} slowest rank", v] for k, v in st.slow_layers.items())])
    sheet("Layers", ["Layer", "Name", *per, "Mean (us)", "Slowest rank", "Imbalance", "Excess (us)"],
          ([x.index, x.name, *(round(x.per_rank_us.get(r, 0.0), 3) for r in ranks), round(x.mean_us, 3),
            x.slowest_rank, round(x.imbalance, 4), round(x.excess_us, 3)] for x in in_order))
    sheet("Modules", ["Module", "Type", "Depth", *per, "Mean (us)", "Slowest rank", "Imbalance", "Excess (us)", "Path"],
          ([m.name, m.type, m.depth, *(round(m.per_rank_us.get(r, 0.0), 3) for r in ranks), round(m.mean_us, 3),
            m.slowest_rank, round(m.imbalance, 4), round(m.excess_us, 3), m.path] for m in res.modules))
    sheet("Categories", ["Category", *per, "Mean (us)", "Slowest rank", "Imbalance"],
          ([c.category, *(round(c.per_rank_us.get(r, 0.0), 3) for r in ranks), round(c.mean_us, 3), c.slowest_rank,
            round(c.imbalance, 4)] for c in res.categories))
    if res.gpu_time:
        sheet(GPU_TIME, ["Rank", *GPU_TIME_HEADERS, "Window"],
              ([*row, g.window] for g in sorted(res.gpu_time, key=lambda g: g.rank)
               for row in gpu_time_rows(SimpleNamespace(total=g.total, devices=[], streams=g.streams), g.rank)))
    col = res.collectives
    if col is not None:
        sheet("Collectives", ["Layer", "Name", *(f"rank {r} wait (us)" for r in ranks), "Late rank", "Lateness (us)"],
              ([x.index, x.name, *(round(x.per_rank_wait_us.get(r, 0.0), 3) for r in ranks),
                x.late_rank, round(x.lateness_us, 3)] for x in sorted(col.layers, key=lambda x: x.index)))
    atomic_save(wb, out)
    return out


def _gpu_time_html(res: TraceSetAnalysis) -> str:
    head = ("<tr><th>rank</th><th>window (us)</th><th>busy %</th><th>idle (us)</th><th>computation (us)</th>"
            "<th>communication (us)</th><th>exposed comm. (us)</th><th>memcpy+memset (us)</th>"
            "<th>comm. overlapped %</th><th>streams</th></tr>")
    rows = []
    for g in sorted(res.gpu_time, key=lambda g: g.rank):
        t = g.total
        ov = "-" if t.comm_overlap_pct is None else f"{t.comm_overlap_pct:.1f}"
        rows.append(f"<tr><td>{g.rank}</td><td class='num'>{t.window_us:,.1f}</td><td class='num'>{t.busy_pct:.1f}</td>"
                    f"<td class='num'>{t.idle_us:,.1f}</td><td class='num'>{t.computation_us:,.1f}</td>"
                    f"<td class='num'>{t.communication_us:,.1f}</td><td class='num'>{t.exposed_communication_us:,.1f}"
                    f"</td><td class='num'>{t.memory_us:,.1f}</td><td class='num'>{ov}</td>"
                    f"<td class='num'>{len(g.streams)}</td></tr>")
    window = _e(res.gpu_time[0].window) if res.gpu_time else ""
    return f"<h2>GPU time per rank ({window})</h2><table>{head}{''.join(rows)}</table>"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1d1d1f}
h1{font-size:20px}h2{font-size:16px;margin-top:24px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #d0d7de;padding:3px 6px;text-align:left}
th{background:#eaf2fb}td.num{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:#666;font-size:12px}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _cell(us: float, mean: float) -> str:
    """A cell tinted red above the row mean and blue below (full colour at +-30 %)."""
    ratio = us / mean if mean > 0 else 1.0
    t = max(-1.0, min(1.0, (ratio - 1.0) / 0.3))
    if t >= 0:
        rgb = (255, int(255 - 120 * t), int(255 - 120 * t))
    else:
        rgb = (int(255 + 100 * t), int(255 + 60 * t), 255)
    return (f'<td class="num" style="background:rgb{rgb}" title="{ratio:.3f}x mean">{us:,.1f}</td>')


Row = tuple[str, dict[int, float], float, str, str]  # name, per-rank us, mean, then two text columns


def _heat(title: str, rows: list[Row], ranks: list[int], depths: list[int] | None = None,
          tail: tuple[str, str] = ("slowest", "imbalance")) -> str:
    head = "".join(f"<th>rank {r}</th>" for r in ranks)
    body = []
    for i, (name, per, mean, x, y) in enumerate(rows):
        cells = "".join(_cell(per.get(r, 0.0), mean) for r in ranks)
        pad = f" style='padding-left:{6 + 14 * depths[i]}px'" if depths else ""
        body.append(f"<tr><td{pad}>{_e(name)}</td>{cells}<td class='num'>{mean:,.1f}</td><td class='num'>{_e(x)}</td>"
                    f"<td class='num'>{_e(y)}</td></tr>")
    return (f"<h2>{_e(title)}</h2><table><tr><th>module</th>{head}<th>mean (us)</th><th>{_e(tail[0])}</th>"
            f"<th>{_e(tail[1])}</th></tr>{''.join(body)}</table>")


def render_set_html(res: TraceSetAnalysis) -> str:
    ranks = _ranks(res)
    st = res.straggler
    verdict = (f"straggler: rank {st.rank} ({st.kind})" if st.rank is not None
               else f"slowness: {st.kind}" if st.kind else "no straggler")
    rank_rows = "".join(f"<tr><td>{r.rank}</td><td class='num'>{r.total_kernel_us:,.1f}</td>"
                        f"<td class='num'>{r.vs_mean:.3f}x</td><td>{_e(r.path)}</td></tr>"
                        for r in sorted(res.ranks, key=lambda r: r.rank))
    layers: list[Row] = [(x.name, x.per_rank_us, x.mean_us, str(x.slowest_rank), f"{x.imbalance:.3f}x")
                         for x in sorted(res.layers, key=lambda x: x.index)]
    top = sorted(res.modules, key=lambda m: (-m.mean_us, m.path))[:HEAT_ROWS]
    top.sort(key=lambda m: m.path)  # tree order: a layer's modules together
    mods: list[Row] = [(m.name, m.per_rank_us, m.mean_us, str(m.slowest_rank), f"{m.imbalance:.3f}x") for m in top]
    parts = [
        f"<h1>Trace set: {len(ranks)} ranks</h1>",
        f"<p><b>{_e(verdict)}</b>. {_e(st.evidence)}</p>",
        "<table><tr><th>rank</th><th>total kernel (us)</th><th>vs mean</th><th>trace</th></tr>"
        f"{rank_rows}</table>",
    ]
    if res.gpu_time:
        parts.append(_gpu_time_html(res))
    if layers:
        parts.append(_heat(f"Layers ({res.layer_source})", layers, ranks))
    parts.append(_heat(f"Modules (the {len(top)} largest by mean time, in tree order)", mods, ranks,
                       [m.depth for m in top]))
    col = res.collectives
    if col is not None:
        waits: list[Row] = []
        for x in sorted(col.layers, key=lambda x: x.index):
            mean = sum(x.per_rank_wait_us.values()) / max(len(x.per_rank_wait_us), 1)
            late = "-" if x.late_rank is None else str(x.late_rank)
            waits.append((x.name, x.per_rank_wait_us, mean, late, f"{x.lateness_us:,.1f}"))
        parts.append(f"<p><b>Collectives</b> ({_e(col.source)}): {_e(col.evidence)}</p>")
        parts.append(_heat("Collective wait per layer (us)", waits, ranks, tail=("late rank", "lateness (us)")))
    parts.append("<p class='muted'>Cells: kernel time (collective tables: wait) in us; red above the row's mean "
                 "over ranks, blue below (full colour at +-30 %).</p>")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>kernelscope trace set</title>"
            f"<style>{_CSS}</style></head><body>{''.join(parts)}</body></html>")


def write_set_html(res: TraceSetAnalysis, path: str | os.PathLike) -> Path:
    out = check_output_path(path, "HTML heat map")
    return atomic_write_text(out, render_set_html(res), what="HTML heat map")
