"""Self-contained HTML report of a ``diff_modules`` result (``kernelscope compare --html``).

One file, no external resources: inline CSS, the block totals table
(``<table id="blocks">``), one side-by-side panel per block with its kernel
matches and annotations, and an inline SVG budget chart drawn with matplotlib.
Written atomically.
"""
from __future__ import annotations

import html
import io
import os
from pathlib import Path

from mcp_server.compare.models import BlockDiff, DiffResult, fmt_ratio, side_reference
from mcp_server.compare.xlsx import category_budget
from mcp_server.core.atomic import atomic_write_text, check_output_path
from mcp_server.core.kernel_names import display_kernel_name

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1d1d1f}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #d0d7de;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#eaf2fb}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.optimize td{background:#ffe4e4;font-weight:600}
.pos{color:#b00020}.neg{color:#1a7f37}
.panel{border:1px solid #9db4d0;border-radius:6px;padding:8px 12px;margin:14px 0}
.panel.optimize{border-color:#d33;border-width:2px}
.panel h3{font-size:14px;margin:4px 0 8px}
.note{margin:2px 0;font-size:12px}.kind{font-weight:700;color:#7b2c9e}
.muted{color:#666;font-size:12px}code{font-size:11px}
"""


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _num(x: float) -> str:
    return f"{x:,.1f}"


def _gap(g: float) -> str:
    cls = "pos" if g > 0 else "neg" if g < 0 else ""
    return f'<td class="num {cls}">{g:+,.1f}</td>'


def budget_svg(res: DiffResult) -> str:
    """Inline SVG: per-category time of both sides and the blocks with the largest gaps."""
    import matplotlib

    from mcp_server.reports import pyplot

    plt = pyplot()

    cats = category_budget(res)[:10]
    blocks = res.blocks[:10]
    with matplotlib.rc_context({"svg.fonttype": "none", "font.size": 9}):
        fig, axes = plt.subplots(1, 2, figsize=(11, 0.35 * max(len(cats), len(blocks), 4) + 1.2))
        for ax, labels, a_vals, b_vals, title in (
            (axes[0], [c for c, _, _ in cats], [a for _, a, _ in cats], [b for _, _, b in cats], "by category (us)"),
            (axes[1], [b.block for b in blocks], [b.a_us for b in blocks], [b.b_us for b in blocks], "by block (us)"),
        ):
            y = list(range(len(labels)))
            ax.barh([v - 0.2 for v in y], a_vals, height=0.4, label=res.a.label, color="#4c78a8")
            ax.barh([v + 0.2 for v in y], b_vals, height=0.4, label=res.b.label, color="#f58518")
            ax.set_yticks(y, labels)
            ax.invert_yaxis()
            ax.set_title(title)
            ax.grid(axis="x", alpha=0.3)
        axes[0].legend(loc="lower right")
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
        plt.close(fig)
    svg = buf.getvalue()
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


def _panel(b: BlockDiff, la: str, lb: str) -> str:
    rows = []
    for m in b.matches:
        rows.append(
            "<tr>"
            f"<td><code title=\"{_e(m.a_name or '')}\">{_e(display_kernel_name(m.a_name, 70))}</code></td>"
            f"<td>{_e(m.a_category or '')}</td><td class=\"num\">{_num(m.a_us) if m.a_name else ''}</td>"
            f"<td>{_e(m.kind)}</td>"
            f"<td><code title=\"{_e(m.b_name or '')}\">{_e(display_kernel_name(m.b_name, 70))}</code></td>"
            f"<td>{_e(m.b_category or '')}</td><td class=\"num\">{_num(m.b_us) if m.b_name else ''}</td>"
            "</tr>"
        )
    notes = "".join(f'<p class="note"><span class="kind">{_e(a.kind)}</span> '
                    f'{_e(a.message)}</p>' for a in b.annotations)
    cls = "panel optimize" if b.optimize else "panel"
    star = "★ " if b.optimize else ""
    return (
        f'<div class="{cls}" id="block-{_e(b.block)}"><h3>{star}{_e(b.block)} '
        f'<span class="muted">{_e(b.role)} — {_e(la)} {_num(b.a_us)} us ({b.a_count}) vs {_e(lb)} '
        f'{_num(b.b_us)} us ({b.b_count}), gap {b.gap_us:+,.1f} us, {fmt_ratio(b.ratio)}</span></h3>'
        f'<table class="matches"><thead><tr><th>{_e(la)} kernel</th><th>category</th><th>us</th><th>match</th>'
        f'<th>{_e(lb)} kernel</th><th>category</th><th>us</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
        f"{notes}</div>"
    )


def render_diff_html(res: DiffResult) -> str:
    la, lb = res.a.label, res.b.label
    block_rows = []
    for b in res.blocks:
        kinds = ", ".join(sorted({a.kind for a in b.annotations}))
        block_rows.append(
            f'<tr class="{"optimize" if b.optimize else ""}"><td>{"★" if b.optimize else ""}</td>'
            f'<td><a href="#block-{_e(b.block)}">{_e(b.block)}</a></td><td>{_e(b.role)}</td>'
            f'<td class="num">{_num(b.a_us)}</td><td class="num">{_num(b.b_us)}</td>{_gap(b.gap_us)}'
            f'<td class="num">{fmt_ratio(b.ratio)}</td><td '
            f'class="num">{b.a_count}/{b.b_count}</td><td>{_e(kinds)}</td></tr>'
        )
    block_rows.append(
        f'<tr><td></td><td><b>total</b></td><td></td><td class="num">{_num(res.total_a_us)}</td>'
        f'<td class="num">{_num(res.total_b_us)}</td>{_gap(res.gap_us)}<td class="num">{fmt_ratio(res.ratio)}</td>'
        "<td></td><td></td></tr>"
    )
    sides = "".join(
        f"<li><b>{_e(s.label)}</b>: <code>{_e(s.path)}</code> ({_e(s.kind)}, {s.kernel_count} kernels, "
        f"{_num(s.total_us)} us{', TRUNCATED' if s.truncated else ''}{_e(side_reference(s))})</li>"
        for s in (res.a, res.b)
    )
    panels = "".join(_panel(b, la, lb) for b in res.blocks if b.matches)
    mism = ""
    if res.mismatches:
        mrows = "".join(
            f"<tr><td>{_e(m.side)}</td><td><code>{_e(display_kernel_name(m.kernel, 90))}</code></td>"
            f"<td>{_e(m.stored)}</td>"
            f'<td>{_e(m.current)}</td><td class="num">{_num(m.us)}</td></tr>' for m in res.mismatches
        )
        mism = ('<h2>Category mismatches (stored vs current rules)</h2><table id="mismatches"><thead><tr><th>side</th>'
                f"<th>kernel</th><th>stored</th><th>current</th><th>us</th></tr></thead><tbody>{mrows}</tbody></table>")
    warns = "".join(f'<p class="note">warning: {_e(w.message)}</p>' for w in res.warnings)
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>kernelscope compare: {_e(la)} vs {_e(lb)}</title><style>{_CSS}</style></head><body>"
        f"<h1>kernelscope compare: {_e(la)} vs {_e(lb)}</h1><ul>{sides}</ul>"
        f'<p class="muted">Functional blocks from <code>{_e(res.blocks_source)}</code>. Gap = {_e(lb)} − {_e(la)}; '
        "★ marks the block with the largest |gap| (optimise first).</p>"
        '<h2>Blocks</h2><table id="blocks"><thead><tr><th></th><th>block</th><th>role</th>'
        f"<th>{_e(la)} us</th><th>{_e(lb)} us</th><th>gap us</th><th>ratio</th><th>kernels A/B</th>"
        f"<th>annotations</th></tr></thead><tbody>{''.join(block_rows)}</tbody></table>"
        f'<h2>Budget</h2><div id="budget-chart">{budget_svg(res)}</div>'
        f"<h2>Blocks side by side</h2>{panels}{mism}{warns}"
        # Marks the block table once the browser has built it (checked by the headless-browser test).
        "<script>(function(){var t=document.getElementById('blocks');if(t){t.setAttribute('data-rendered-rows',"
        "String(t.querySelectorAll('tbody tr').length));}})();</script></body></html>"
    )


def write_diff_html(res: DiffResult, path: str | os.PathLike) -> Path:
    out = check_output_path(path, "HTML report")
    return atomic_write_text(out, render_diff_html(res), what="HTML report")
