"""xlsx export of a ``diff_modules`` result (``kernelscope compare -o diff.xlsx``), written atomically."""
from __future__ import annotations

import os
from pathlib import Path

from mcp_server.compare.models import DiffResult
from mcp_server.core.atomic import check_output_path


def category_budget(res: DiffResult) -> list[tuple[str, float, float]]:
    """(category, a_us, b_us) summed over the blocks' kernels, sorted by |gap|."""
    acc: dict[str, list[float]] = {}
    for b in res.blocks:
        for k in b.a_kernels:
            acc.setdefault(k.category, [0.0, 0.0])[0] += k.us
        for k in b.b_kernels:
            acc.setdefault(k.category, [0.0, 0.0])[1] += k.us
    rows = [(c, v[0], v[1]) for c, v in acc.items()]
    rows.sort(key=lambda r: (-abs(r[2] - r[1]), r[0]))
    return rows


def write_diff_xlsx(res: DiffResult, path: str | os.PathLike) -> Path:
    """The result as a workbook (the sheets of ``_sheets``), the block to optimise first starred."""
    from openpyxl import Workbook

    from mcp_server.reports import Sheet, atomic_save

    out = check_output_path(path, "xlsx diff")
    wb = Workbook(write_only=True)
    for name, cols, rows in _sheets(res):
        sheet = Sheet(wb, name)
        sheet.header(cols)
        for row in rows:
            if name == "Blocks" and row[:1] == ["★"]:
                sheet.highlight(row)
            else:
                sheet.append(row)
    atomic_save(wb, out)
    return out


def _sheets(res: DiffResult) -> list[tuple[str, list[str], list[list]]]:
    """Per sheet of the workbook: name, header row, rows."""
    la, lb = res.a.label, res.b.label
    budget = category_budget(res)
    ta = sum(r[1] for r in budget) or 1.0
    tb = sum(r[2] for r in budget) or 1.0
    return [
        ("Blocks", ["Optimize", "Block", "Role", f"{la} (us)", f"{lb} (us)", "Gap (us, B-A)", "Ratio B/A",
                    f"{la} kernels", f"{lb} kernels", "Annotations", "Module keys"],
         [["★" if b.optimize else "", b.block, b.role, round(b.a_us, 3), round(b.b_us, 3), round(b.gap_us, 3),
           None if b.ratio is None else round(b.ratio, 4), b.a_count, b.b_count,
           "; ".join(f"{a.kind}: {a.message}" for a in b.annotations), ", ".join(b.module_types)]
          for b in res.blocks]
         + [["", "Total", "", round(res.total_a_us, 3), round(res.total_b_us, 3), round(res.gap_us, 3),
             None if res.ratio is None else round(res.ratio, 4)]]),
        ("Kernel Matches", ["Block", "Match", "Segment", f"{la} kernel", f"{la} category", f"{la} (us)",
                            f"{lb} kernel", f"{lb} category", f"{lb} (us)"],
         [[b.block, m.kind, m.segment, m.a_name or "", m.a_category or "", round(m.a_us, 3),
           m.b_name or "", m.b_category or "", round(m.b_us, 3)] for b in res.blocks for m in b.matches]),
        ("Annotations", ["Block", "Kind", "Side", "Category", "Message", "Kernels"],
         [[b.block, a.kind, la if a.side == "a" else lb, a.category or "", a.message, " | ".join(a.kernels)]
          for b in res.blocks for a in b.annotations]),
        ("Budget", ["Category", f"{la} (us)", f"{la} %", f"{lb} (us)", f"{lb} %", "Gap (us, B-A)", "Ratio B/A"],
         [[c, round(a_us, 3), round(100 * a_us / ta, 2), round(b_us, 3), round(100 * b_us / tb, 2),
           round(b_us - a_us, 3), round(b_us / a_us, 4) if a_us > 0 else None] for c, a_us, b_us in budget]),
        ("Category Mismatches", ["Side", "Kernel", "Stored", "Current", "Total (us)"],
         [[mm.side, mm.kernel, mm.stored, mm.current, round(mm.us, 3)] for mm in res.mismatches]),
        ("Sides", ["Side", "Label", "Path", "Kind", "Table", "Truncated", "Phase", "Kernels", "Total (us)",
                   "Categories sha256", "Steps", "Reference", "Reference phase", "Attribution", "Confidence",
                   "Attribution suspect"],
         [[key, s.label, s.path, s.kind, s.source_table, s.truncated, s.phase or "", s.kernel_count,
           round(s.total_us, 3), s.categories_sha256, s.steps, s.reference or "", s.reference_phase or "",
           s.attribution_method or "", s.attribution_confidence, s.attribution_suspect]
          for key, s in (("A", res.a), ("B", res.b))]
         + [[], ["Blocks file", res.blocks_source]] + [["Warning", w.code, w.message] for w in res.warnings]),
    ]
