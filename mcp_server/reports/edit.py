"""Edits of report workbooks: re-apply the kernel category rules (``recategorize``).

For each report (kernelscope's or torch-profiler-parser's, either layout) the
``Category`` column of every detail sheet, of ``GPU Kernels`` and of the full
kernel table is re-classified with the one category classifier; then

* each detail sheet's category table moves the time of every re-classified
  row from its old to its new category (so a table that upstream built from
  more kernels than the 1000 shown keeps the hidden kernels' time);
* the ``Summary`` category table is recomputed from the full kernel table when
  the report has one, else the re-classified ``GPU Kernels`` rows' time and
  counts move between categories;
* ``Module Tree`` breakdown strings move time the same way: exactly per node
  for kernelscope reports (their tree has a ``Path`` column and the full
  table gives every kernel's module path); for upstream reports, which do not
  record which kernels sit under which node, a category's time moves in the
  proportion that category moved globally, and the plan says so in a warning.

``plan_recategorize`` reads a workbook and works out every edit;
``write_plan`` rewrites only the changed cells (``xlsx_patch``: formatting
and all other parts stay as they are), atomically; a second run with the same
rules changes nothing. The engine (``mcp_server.compare.recategorize``) calls these.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from mcp_server.core.atomic import atomic_copy, sweep_stale_temps
from mcp_server.core.categories import CategoryRules
from mcp_server.core.errors import ReportFormatError
from mcp_server.core.models import Warning_
from mcp_server.core.vocab import WarningCode
from mcp_server.reports import layout as L
from mcp_server.reports.sheets import (
    Source,
    _Book,
    _category_header,
    _cell,
    _find_header,
    _header_index,
    _is_detail,
    _num,
    _require,
    _s,
    _split_label,
    detect_source,
)
from mcp_server.reports.xlsx_patch import WorkbookPatch, patch_workbook

# --------------------------------------------------------------------------- planning


class EditPlan:
    """The cell edits of one workbook, with the kernels whose category changed and warnings."""

    def __init__(self, path: str):
        self.path = path
        self.patch = WorkbookPatch()
        self.changes: dict[tuple[str, str, str], None] = {}
        self.rows_changed = 0
        self.warnings: list[Warning_] = []
        self.sheets: dict[str, None] = {}

    def set_cells(self, sheet: str, cells: list[tuple[int, int, Any]]) -> None:
        if not cells:
            return
        self.sheets[sheet] = None

        def apply(sx, cells=cells):
            for r, c, v in cells:
                sx.set_cell(r, c, v)
        self.patch.add(sheet, apply)

    def replace_rows(self, sheet: str, first: int, last: int, rows: list[list[Any]]) -> None:
        self.sheets[sheet] = None
        self.patch.add(sheet, lambda sx: sx.replace_rows(first, last, rows))


def _reclassify_column(plan: EditPlan, sheet: str, rows, start: int, name_i: int, cat_i: int, rules,
                       stop_on_truncated: bool = True):
    """Re-classify one Category column; returns [(row_index0, name, old, new)] of changed rows."""

    changed = []
    cells = []
    classify = rules.classify
    trunc = L.TRUNCATED_PREFIX
    for rn in range(start, len(rows)):
        r = rows[rn]
        if stop_on_truncated and r and isinstance(r[0], str) and r[0].startswith(trunc):
            break
        name = r[name_i] if name_i < len(r) else ""
        if not isinstance(name, str):
            name = _s(name)
        if not name:
            continue
        old = _s(_cell(r, cat_i))
        new = classify(name.strip())
        if new != old:
            changed.append((rn, name.strip(), old, new))
            cells.append((rn + 1, cat_i, new))
            plan.changes[(name.strip(), old, new)] = None
    plan.rows_changed += len(cells)
    plan.set_cells(sheet, cells)
    return changed


def _round(v: float, nd: int) -> float:
    r = round(v, nd)
    return 0.0 if r == 0 else r


def _plan_detail(plan: EditPlan, book, sheet: str, rules, nd: int) -> None:

    rows = book.rows(sheet)
    kh = _find_header(rows, "Module", "Kernel Name", 1)
    if kh is None:
        raise book.missing(sheet, "kernel table header row ('Module, Input Dims, Kernel Name, ...') not found")
    idx = _header_index(rows[kh])
    _require(book, sheet, idx, ["Kernel Name", "Duration (us)", "Category"], kh + 1)
    ni, di, ci = idx["Kernel Name"], idx["Duration (us)"], idx["Category"]
    changed = _reclassify_column(plan, sheet, rows, kh + 1, ni, ci, rules)
    if not changed:
        return
    ch = _find_header(rows, "Category", "Total Duration (us)", 1)
    if ch is None or ch > kh:
        plan.warnings.append(Warning_(code=WarningCode.no_category_table,
                                      message=f"sheet '{sheet}': no category table above the kernel table; "
                                              "only the Category column was updated"))
        return
    cidx = _header_index(rows[ch])
    ti = cidx.get("Total Duration (us)")
    pi = cidx.get("Percentage (%)")
    table: dict[str, float] = {}
    first = ch + 1
    last = ch
    total_row = None
    for rn in range(ch + 1, kh):
        name = _s(_cell(rows[rn], 0))
        if not name:
            break
        if name == "Total":
            total_row = rn
            break
        table[name] = _num(_cell(rows[rn], ti))
        last = rn
    for rn, _name, old, new in changed:
        dur = _num(_cell(rows[rn], di))
        table[old] = table.get(old, 0.0) - dur
        table[new] = table.get(new, 0.0) + dur
    total = _num(_cell(rows[total_row], ti)) if total_row is not None else sum(v for v in table.values() if v > 0)
    eps = 0.5 * 10 ** -nd
    new_rows = []
    for cat, us in sorted(table.items(), key=lambda kv: -kv[1]):
        if us <= eps:
            continue
        row: list[Any] = [None] * (max(ti or 0, pi or 0) + 1)
        row[0] = cat
        if pi is not None:
            row[pi] = f"{us / total * 100 if total > 0 else 0:.0f}%"
        if ti is not None:
            row[ti] = _round(us, nd)
        new_rows.append(row)
    if last < first:  # empty table: insert before the Total row
        last = first - 1
    plan.replace_rows(sheet, first + 1, last + 1, new_rows)


def _summary_table(book):
    rows = book.rows(L.SUMMARY)
    c, idx = _category_header(book, rows)
    table: dict[str, list[float]] = {}
    last = c
    for rn in range(c + 1, len(rows)):
        name = _s(_cell(rows[rn], idx["Category"]))
        if not name:
            break
        table[name] = [_num(_cell(rows[rn], idx["Total (us)"])), _num(_cell(rows[rn], idx.get("Count")))]
        last = rn
    total = None
    for r in rows[:c]:
        if _s(_cell(r, 0)) == L.SUMMARY_TOTAL_LABEL:
            total = L.parse_number(_cell(r, 1))
    return c, last, idx, table, total


def _write_summary_table(plan: EditPlan, header_row0: int, last0: int, idx: dict[str, int],
                         table: dict[str, list[float]], total: float, nd: int, old: dict[str, list[float]]) -> None:
    width = max(idx.values()) + 1
    new_rows = []
    eps = 0.5 * 10 ** -nd
    items = [(k, v) for k, v in table.items() if v[0] > eps or v[1] > 0.5]
    items.sort(key=lambda kv: -kv[1][0])
    same = len(items) == len(old) and all(
        k in old and abs(old[k][0] - _round(v[0], nd)) <= 1.5 * 10 ** -nd and int(round(old[k][1])) == int(round(v[1]))
        for k, v in items) and [k for k, _ in items] == list(old)
    if same:
        return
    for cat, (us, cnt) in items:
        row: list[Any] = [None] * width
        row[idx["Category"]] = cat
        if "Count" in idx:
            row[idx["Count"]] = int(round(cnt))
        row[idx["Total (us)"]] = _round(us, nd)
        if "Avg (us)" in idx:
            row[idx["Avg (us)"]] = _round(us / cnt, nd) if cnt else 0.0
        if "Percentage" in idx:
            row[idx["Percentage"]] = f"{us / total * 100 if total > 0 else 0:.1f}%"
        new_rows.append(row)
    plan.replace_rows(L.SUMMARY, header_row0 + 2, last0 + 1, new_rows)


def _plan_tree(plan: EditPlan, book, moves_by_node, global_frac) -> None:
    """Rewrite Module Tree breakdown strings.

    ``moves_by_node``: path -> {(old, new): us} (exact), or None to use ``global_frac``
    {old: {new: fraction}} (proportional estimate).
    """

    sheet = L.MODULE_TREE
    if sheet not in book.names:
        return
    rows = book.rows(sheet)
    if not rows:
        return
    idx = _header_index(rows[0])
    if "Breakdown" not in idx or "Module" not in idx:
        raise book.missing(sheet, "missing column(s) 'Module'/'Breakdown' in the header row 1")
    bi, mi, ti = idx["Breakdown"], idx["Module"], idx.get("Total Time (us)")
    pai = idx.get(L.TREE_PATH_HEADER)
    cells = []
    estimated = False
    stack: list[str] = []
    for rn in range(1, len(rows)):
        r = rows[rn]
        label = str(_cell(r, mi) or "")
        if not label.strip() or label.startswith(L.TRUNCATED_PREFIX):
            continue
        depth, name = _split_label(label)
        stack = stack[:depth] + [name]
        text = _s(_cell(r, bi))
        if not text:
            continue
        bd = L.parse_breakdown(text)
        if moves_by_node is not None:
            path = _s(_cell(r, pai)) or "/".join(stack)
            mv = moves_by_node.get(path)
            if not mv:
                continue
            for (old, new), us in mv.items():
                bd[old] = bd.get(old, 0.0) - us
                bd[new] = bd.get(new, 0.0) + us
        else:
            moved = False
            for old, targets in global_frac.items():
                base = bd.get(old, 0.0)
                if base <= 0:
                    continue
                for new, f in targets.items():
                    if f <= 0:
                        continue
                    if f < 0.999999:
                        estimated = True
                    bd[old] = bd.get(old, 0.0) - base * f
                    bd[new] = bd.get(new, 0.0) + base * f
                    moved = True
            if not moved:
                continue
        total = _num(_cell(r, ti)) if ti is not None else sum(v for v in bd.values() if v > 0)
        new_text = L.format_breakdown({k: v for k, v in bd.items() if v > 0.5 or (v > 0 and total < 1)}, total)
        if new_text != text:
            cells.append((rn + 1, bi, new_text))
    plan.set_cells(sheet, cells)
    if estimated:
        plan.warnings.append(Warning_(
            code=WarningCode.tree_breakdown_estimated,
            message="Module Tree breakdowns: this report does not record which kernels sit under which node, and "
                    "a category was split between new categories, so its time was moved in proportion to the "
                    "global move (estimate)"))


def plan_recategorize(path: str | Path, rules: CategoryRules) -> tuple[EditPlan, Source]:
    """Read the report at ``path`` and work out every edit ``rules`` imply; returns (plan, source)."""
    book = _Book(str(path))
    names = book.names
    plan = EditPlan(str(path))
    book.prefetch(names)
    detail = [s for s in names if _is_detail(book, s)]
    source = detect_source(book)
    nd = 3 if source == "kernelscope" else 1  # decimals the report's tables are written with
    for required in (L.SUMMARY, L.GPU_KERNELS):
        if required not in names:
            raise ReportFormatError(f"sheet '{required}' is missing (sheets: {', '.join(names)})", path=str(path))
    for s in detail:
        _plan_detail(plan, book, s, rules, nd)
    gk = _plan_gpu_kernels(plan, book, rules)
    full = _plan_full_tables(plan, book, rules)
    summary = _summary_table(book)
    _plan_summary(plan, gk, full, summary, nd)
    _plan_module_tree(plan, book, gk, full, summary)
    return plan, source


class _GpuKernels:
    """The GPU Kernels sheet's rows, header index, re-classified rows and truncation."""

    def __init__(self, rows, idx, changed, truncated):
        self.rows, self.idx, self.changed, self.truncated = rows, idx, changed, truncated


def _plan_gpu_kernels(plan: EditPlan, book, rules) -> _GpuKernels:
    gk, gidx = book.headed(L.GPU_KERNELS, L.GPU_KERNELS_REQUIRED)
    changed = _reclassify_column(plan, L.GPU_KERNELS, gk, 1, gidx["Kernel Name"], gidx["Category"], rules)
    truncated = any(_s(_cell(r, 0)).startswith(L.TRUNCATED_PREFIX) for r in gk[1:])
    return _GpuKernels(gk, gidx, changed, truncated)


class _FullTables:
    """Per category [us, count] over the full tables, and per tree node the time each (old, new) move shifts."""

    def __init__(self, sheets: list[str]):
        self.sheets = sheets
        self.categories: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        # tree nodes are keyed by instance path (a node covers all its phases)
        self.node_moves: dict[str, dict[tuple[str, str], float]] = defaultdict(lambda: defaultdict(float))


def _plan_full_tables(plan: EditPlan, book, rules) -> _FullTables:
    out = _FullTables([s for s in book.names if L.is_full_table_sheet(s)])
    for s in out.sheets:
        rows, fidx = book.headed(s, ["name", "category", "dur_us"])
        ni, ci, di = fidx["name"], fidx["category"], fidx["dur_us"]
        pi = fidx.get("module_path")
        changed = _reclassify_column(plan, s, rows, 1, ni, ci, rules, stop_on_truncated=False)
        changed_rows = {rn: new for rn, _, _, new in changed}
        for rn in range(1, len(rows)):
            r = rows[rn]
            name = _s(_cell(r, ni))
            if not name:
                continue
            dur = _num(_cell(r, di))
            cat = changed_rows.get(rn) or _s(_cell(r, ci))
            e = out.categories[cat]
            e[0] += dur
            e[1] += 1
        for rn, _name, old, new in changed:
            r = rows[rn]
            mpath = _s(_cell(r, pi))
            if not mpath:
                continue
            dur = _num(_cell(r, di))
            parts = mpath.split("/")
            for d in range(1, len(parts) + 1):
                out.node_moves["/".join(parts[:d])][(old, new)] += dur
    return out


def _plan_summary(plan: EditPlan, gk: _GpuKernels, full: _FullTables, summary, nd: int) -> None:
    """The Summary category table: from the full tables when present, else moved by the GPU Kernels changes."""
    c, last, sidx, table, total = summary
    if full.sheets:
        new_table = {k: [v[0], v[1]] for k, v in full.categories.items()}
        tot = total if total is not None else sum(v[0] for v in new_table.values())
        _write_summary_table(plan, c, last, sidx, new_table, tot, nd, table)
    elif gk.changed:
        new_table = {k: list(v) for k, v in table.items()}
        ti, ki = gk.idx["Total Duration (us)"], gk.idx["Count"]
        for rn, _name, old, new in gk.changed:
            us, cnt = _num(_cell(gk.rows[rn], ti)), _num(_cell(gk.rows[rn], ki))
            new_table.setdefault(old, [0.0, 0.0])
            new_table.setdefault(new, [0.0, 0.0])
            new_table[old][0] -= us
            new_table[old][1] -= cnt
            new_table[new][0] += us
            new_table[new][1] += cnt
        tot = total if total is not None else sum(v[0] for v in table.values())
        _write_summary_table(plan, c, last, sidx, new_table, tot, nd, table)
    if gk.truncated and not full.sheets:
        plan.warnings.append(Warning_(
            code=WarningCode.gpu_kernels_truncated,
            message="GPU Kernels is truncated at 1000 rows: kernels beyond the cap are not listed, so their "
                    "time stays in its old category in the Summary table"))


def _plan_module_tree(plan: EditPlan, book, gk: _GpuKernels, full: _FullTables, summary) -> None:
    """Module Tree breakdowns: exact per node from the full tables, else in proportion to the global move."""
    if full.sheets:
        if full.node_moves:  # the tree's Path column (or, lacking it, the indentation) names each node
            _plan_tree(plan, book, full.node_moves, None)
        return
    if not gk.changed:
        return
    table = summary[3]
    moved: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    ti = gk.idx["Total Duration (us)"]
    for rn, _name, old, new in gk.changed:
        moved[old][new] += _num(_cell(gk.rows[rn], ti))
    frac: dict[str, dict[str, float]] = {}
    for old, targets in moved.items():
        base = table.get(old, [0.0])[0]
        if base <= 0:
            base = sum(targets.values())
        frac[old] = {new: min(1.0, us / base) for new, us in targets.items()}
    _plan_tree(plan, book, None, frac)

def write_plan(plan: EditPlan, out: str | Path, *, force: bool = False) -> None:
    """Write the edited workbook at ``out`` (the source itself when in place), atomically.

    With no edits the source is copied unchanged (atomically too; nothing is written when ``out``
    is the source). A read-only ``out`` is refused unless ``force``; a symlinked one writes its target.
    """
    src, dst = Path(plan.path), Path(out)
    if plan.patch.edits:
        patch_workbook(str(src), str(dst), plan.patch, force=force)
    elif dst.resolve() != src.resolve():
        atomic_copy(src, dst, "report copy", force=force)
    else:  # nothing to write in place; still clear what a killed earlier run left beside it
        sweep_stale_temps(dst.resolve())
