"""Read report workbooks: kernelscope's own and torch-profiler-parser's (both layouts).

Assembles a ``Report`` from the sheets (``sheets``: one reader per sheet, python-calamine, columns
found by their header text). What the compare engines need:

* ``Report.kernels``: the per-kernel table. From ``Kernels (full)`` when the
  workbook has it (kernelscope reports: exact, every kernel); otherwise
  assembled from the detail sheets (upstream reports: one representative
  instance per sheet, at most 1000 rows each; ``kernels_truncated`` says when
  a cap was hit). For detail rows, ``module_type`` is the sheet's module type,
  ``module`` the instance in the Module column and ``phase`` comes from the
  sheet name's ``(pre|dec)`` suffix.
* ``Report.gpu_kernels``: the ``GPU Kernels`` sheet (one row per kernel name),
  with ``gpu_kernels_truncated``.
* ``Report.summary_categories``: the ``Summary`` category table.
* ``Report.stored_categories()``: kernel name -> category as stored.
* ``kernel_table(report)``: the kernel table in the ``KERNEL_COLUMNS`` shape.

A sheet or column an operation needs that is missing raises
``ReportFormatError`` naming the file, the sheet and what is missing.
"""
from __future__ import annotations

import os
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Literal, Optional, TypeVar

import pandas as pd

from mcp_server.core.errors import FileMissingError, ReportFormatError
from mcp_server.core.vocab import module_type
from mcp_server.reports import layout as L
from mcp_server.reports.sheets import (
    _UNKNOWN,
    DetailSheet,
    Source,
    _Book,
    _is_detail,
    _read_detail,
    _read_full,
    _read_gpu_kernels,
    _read_metadata,
    _read_overview,
    _read_summary,
    _read_tree,
    _split_label,
    detect_source,
)

T = TypeVar("T")
ALL_PARTS = ("kernels", "gpu_kernels", "summary", "tree", "overview", "details", "metadata")


@dataclass
class Report:
    path: str
    source: Source
    sheets: list[str]
    kernels: Optional[pd.DataFrame] = None
    kernels_from: Optional[Literal["full", "detail"]] = None
    kernels_truncated: bool = False
    gpu_kernels: Optional[pd.DataFrame] = None
    gpu_kernels_truncated: bool = False
    summary_categories: Optional[pd.DataFrame] = None
    summary_modules: Optional[pd.DataFrame] = None
    total_kernel_us: Optional[float] = None
    tree: Optional[pd.DataFrame] = None
    overview: Optional[pd.DataFrame] = None
    detail_sheets: list[DetailSheet] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    #: upstream reports: the detail sheets the kernel table was built from (non-overlapping)
    covering_sheets: list[str] = field(default_factory=list)
    #: upstream reports: launch time taken from 'GPU Kernels' for kernels outside every covering sheet
    residual_us: float = 0.0
    #: upstream reports: (summary total, kernel-table total) when they differ by more than 1 %
    unreconciled: Optional[tuple[float, float]] = None

    def stored_categories(self) -> dict[str, str]:
        """Kernel name -> category as stored in the report (full table, else GPU Kernels, else details)."""
        out: dict[str, str] = {}
        for df, ncol in ((self.kernels, "name"), (self.gpu_kernels, "name")):
            if df is not None and len(df):
                for n, c in zip(df[ncol].tolist(), df["category"].tolist()):
                    out.setdefault(str(n), str(c))
        return out



def is_kernelscope_report(path: str | os.PathLike) -> bool:
    """Whether ``path`` is one of kernelscope's own reports (sheet names only; False when unreadable)."""
    from python_calamine import CalamineWorkbook

    from mcp_server.reports.guard import check_xlsx

    try:
        check_xlsx(path)
        names = CalamineWorkbook.from_path(str(path)).sheet_names
    except Exception:  # unreadable (or over a bound): the reader raises its typed error later
        return False
    return L.is_kernelscope_workbook(names)



def read_report(path: str | os.PathLike, *, need: Iterable[str] = ALL_PARTS) -> Report:
    """Read the parts of a report workbook listed in ``need`` (see ``ALL_PARTS``).

    ``need`` names parts that must be present: a missing sheet or column for one of
    them raises ``ReportFormatError``. ``details`` (detail sheets' facts) is read
    whenever ``kernels`` comes from detail sheets.
    """
    p = Path(path)
    if not p.exists():
        raise FileMissingError("report not found", path=p)
    if p.is_dir():
        raise FileMissingError("report path is a directory, expected an .xlsx file", path=p)
    if not zipfile.is_zipfile(p):
        raise ReportFormatError("not an xlsx workbook (not a zip archive)", path=p)
    need = set(need)
    unknown = need - set(ALL_PARTS)
    if unknown:
        raise ValueError(f"unknown report parts {sorted(unknown)}; choose from {ALL_PARTS}")
    book = _Book(str(p))
    names = book.names
    rep = Report(path=str(p), source=detect_source(book), sheets=list(names))

    if "metadata" in need:
        rep.metadata = _read_metadata(book)
    if "summary" in need:
        rep.summary_categories, rep.summary_modules, rep.total_kernel_us = _read_summary(book)
    if "gpu_kernels" in need:
        rep.gpu_kernels, rep.gpu_kernels_truncated = _read_gpu_kernels(book)
    if "tree" in need:
        rep.tree = _read_tree(book)
    if "overview" in need:
        rep.overview = _read_overview(book)
    use_full = "kernels" in need and any(L.is_full_table_sheet(s) for s in names)
    want_detail_rows = "kernels" in need and not use_full
    if "details" in need or want_detail_rows:
        book.prefetch([s for s in names if s not in L.NON_DETAIL_SHEETS])
        detail_names = [s for s in names if _is_detail(book, s)]
        # columns accumulated over every detail sheet, one DataFrame built at the end
        cols: dict[str, list] = defaultdict(list)
        for s in detail_names:
            ds, rows = _read_detail(book, s, want_detail_rows)
            rep.detail_sheets.append(ds)
            if rows is not None:
                n = len(rows["name"])
                for key, vals in rows.items():
                    cols[key].extend(vals)
                base = "/".join(x for x in (ds.parent_path, ds.module) if x)
                root = module_type(ds.parent_path.split("/")[0]) if ds.parent_path else ds.module_type
                cols["module_path"].extend(
                    base if (not m or m == ds.module) else f"{base}/{m}" for m in rows["module"])
                for key, val in (("sheet", s), ("module_type", ds.module_type), ("phase", ds.phase),
                                 ("detail_module", ds.module), ("root_type", root)):
                    cols[key].extend([val] * n)
        if want_detail_rows:
            if not detail_names:
                raise ReportFormatError("no kernel table: neither a 'Kernels (full)' sheet nor any detail sheet",
                                        path=p)
            order = ["name", "category", "dur_us", "module", "input_dims", "source", "row", "sheet",
                     "module_type", "phase", "detail_module", "module_path", "root_type"]
            rep.kernels = pd.DataFrame({k: cols[k] for k in order if k in cols})
            rep.kernels_from = "detail"
            rep.kernels_truncated = any(d.truncated for d in rep.detail_sheets)
            _reconcile_upstream(book, rep)
    if use_full:
        rep.kernels = _read_full(book)
        rep.kernels_from = "full"
    return rep


# --------------------------------------------------------------------------- upstream reconciliation


def _optional(book: _Book, sheet: str, read: Callable[[_Book], T]) -> Optional[T]:
    """``read(book)`` when the workbook has ``sheet`` and it reads, else None (reconciling is best effort)."""
    if sheet not in book.names:
        return None
    try:
        return read(book)
    except ReportFormatError:
        return None


def _parent_types(book: _Book) -> dict[str, set[str]]:
    """Module type -> the types it is a child of, from the ``Overview`` tree (depth-indented rows)."""
    out: dict[str, set[str]] = defaultdict(set)
    ov = _optional(book, L.OVERVIEW, _read_overview)
    if ov is None:
        return out
    stack: list[str] = []
    for label, depth in zip(ov["label"], ov["depth"]):
        d = int(depth)
        t = _split_label(str(label))[1]
        stack = stack[:d]
        if t != "(self)" and stack:
            out[t].add(stack[-1])
        stack.append(t)
    return out


def _instance_paths(book: _Book, df: pd.DataFrame, path_of: dict[str, str], sheet_path: dict[str, str]) -> list[str]:
    """Full instance path per detail row. The ``Module Tree`` names most instances; the leaves it
    leaves out (``Linear_N`` under attention or MLP) are placed under the nearest row's instance
    (before, else after, in execution order) whose chain holds a type the ``Overview`` lists as the
    leaf type's parent."""
    parents = _parent_types(book)
    mods = [str(m) for m in df["module"]]
    sheets = [str(x) for x in df["sheet"]]
    known = [path_of.get(m, "") for m in mods]
    out = list(known)
    n = len(mods)
    for i in range(n):
        if known[i] or not mods[i]:
            continue
        want = parents.get(module_type(mods[i]), set())
        found = ""
        for step in (-1, 1):  # the nearest named row each way; the deeper parent wins (before on a tie)
            j = i + step
            while 0 <= j < n and sheets[j] == sheets[i] and not known[j]:
                j += step
            if not (0 <= j < n and sheets[j] == sheets[i]):
                continue
            parts = known[j].split("/")
            for cut in range(len(parts), 0, -1):
                if module_type(parts[cut - 1]) in want:
                    if cut > (found.count("/") + 1 if found else 0):
                        found = "/".join(parts[:cut])
                    break
        base = found or sheet_path.get(sheets[i], "")
        out[i] = f"{base}/{mods[i]}" if base else mods[i]
    return out

RESIDUAL_SOURCE = "(GPU Kernels: outside the detail sheets)"


def _reconcile_upstream(book: _Book, rep: Report) -> None:
    """Make an upstream report's detail-assembled kernel table add up to its ``Summary`` total.

    Detail sheets overlap: a parent type's sheet (``LlamaModel``) holds the kernels of its
    children's sheets (``LlamaDecoderLayer``). Only the sheets whose instance lies inside no other
    sheet's instance (same phase) are kept (``covering_sheets``); their rows get full instance paths
    from the ``Module Tree``. Kernels outside every kept sheet (``lm_head`` outside ``LlamaModel``,
    the layers a representative instance does not show) are added from ``GPU Kernels``: per kernel
    name, its total minus the rows kept, attributed to an instance outside the kept sheets whose type
    the row lists. ``unreconciled`` holds (Summary total, table total) when they still differ by > 1 %.
    """
    df = rep.kernels
    if df is None or rep.source == "kernelscope":
        return
    tree = _optional(book, L.MODULE_TREE, _read_tree)
    path_of: dict[str, str] = {}
    phase_of: dict[str, str] = {}
    if tree is not None and len(tree):
        counts = tree["module"].value_counts()
        for name, path, ph in zip(tree["module"], tree["path"], tree["phase"]):
            if counts[name] == 1:
                path_of[str(name)] = str(path)
                phase_of[str(name)] = str(ph)
    sheet_path = {ds.sheet: path_of.get(ds.module) or "/".join(x for x in (ds.parent_path, ds.module) if x)
                  for ds in rep.detail_sheets}
    rep.covering_sheets = keep = [
        ds.sheet for ds in rep.detail_sheets
        if not any(o is not ds and o.phase == ds.phase and sheet_path[o.sheet] and
                   sheet_path[ds.sheet].startswith(sheet_path[o.sheet] + "/") for o in rep.detail_sheets)]
    df = df[df["sheet"].isin(keep)].reset_index(drop=True)
    if path_of and len(df):
        df["module_path"] = _instance_paths(book, df, path_of, sheet_path)
        df["root_type"] = df["module_path"].map(lambda p: module_type(str(p).split("/")[0]) if p else "")
    if rep.gpu_kernels is None:
        rep.gpu_kernels, rep.gpu_kernels_truncated = _optional(book, L.GPU_KERNELS, _read_gpu_kernels) or (None, False)
    extra = _residual_rows(rep, df, tree, [sheet_path[s] for s in keep if sheet_path.get(s)], phase_of)
    if extra:
        add = pd.DataFrame(extra)
        for c in df.columns:
            if c not in add:
                add[c] = -1 if c == "row" else ""
        df = pd.concat([df, add[list(df.columns)]], ignore_index=True)
    rep.kernels = df
    total = rep.total_kernel_us
    if total is None:
        summary = _optional(book, L.SUMMARY, _read_summary)
        total = summary[2] if summary else None
    got_total = float(df["dur_us"].sum()) if len(df) else 0.0
    if total and abs(got_total - total) > 0.01 * total:
        rep.unreconciled = (float(total), got_total)


def _residual_rows(rep: Report, df: pd.DataFrame, tree: Optional[pd.DataFrame], covered: list[str],
                   phase_of: dict[str, str]) -> dict[str, list]:
    """The kernels outside the kept sheets (``covered``: their instance paths), from ``GPU Kernels``: per kernel
    name its total less the kept rows, spread over its remaining launches and placed on the first module
    outside ``covered`` whose type the row lists (adds to ``rep.residual_us``)."""
    extra: dict[str, list] = defaultdict(list)
    gk = rep.gpu_kernels
    if gk is None or not len(gk):
        return extra
    have = df.groupby("name")["dur_us"].agg(["sum", "size"]) if len(df) else None
    outside = [] if tree is None else [
        (str(name), str(path)) for name, path, kc in zip(tree["module"], tree["path"], tree["kernel_count"])
        if kc > 0 and not any(str(path) == c or str(path).startswith(c + "/") for c in covered)]
    for name, cat, total, cnt, types in zip(gk["name"], gk["category"], gk["total_us"], gk["count"],
                                            gk["module_types"]):
        got, n = (float(have.loc[name, "sum"]), int(have.loc[name, "size"])) if (
            have is not None and name in have.index) else (0.0, 0)
        rest = float(total) - got
        if rest <= 0.05 * (n + 1) + 1e-9:  # detail rows and GPU Kernels are rounded to 0.1 us
            continue
        k = max(int(cnt) - n, 1)
        listed = {t.strip() for t in str(types).split(",") if t.strip()}
        inst, path = next(((i, p) for i, p in outside if module_type(i) in listed), ("", ""))
        for key, val in (("name", name), ("category", cat), ("dur_us", rest / k), ("module", inst),
                         ("module_path", path), ("module_type", module_type(inst) if inst else ""),
                         ("root_type", module_type(path.split("/")[0]) if path else ""),
                         ("phase", phase_of.get(inst, "")), ("source", RESIDUAL_SOURCE)):
            extra[key].extend([val] * k)
        rep.residual_us += rest
    return extra


def kernel_table(report: Report) -> pd.DataFrame:
    """The report's kernels in the ``KERNEL_COLUMNS`` shape (unknown: '' for text, -1 for numbers).

    Rows keep the report's order (execution order within each detail sheet).
    Extra columns of detail-assembled tables (``sheet``, ``detail_module``) are kept.
    """
    from mcp_server.core.vocab import KERNEL_COLUMNS

    if report.kernels is None:
        raise ReportFormatError("kernel table not read (call read_report with need including 'kernels')",
                                path=report.path)
    df = report.kernels.copy()
    n = len(df)
    for c in KERNEL_COLUMNS:
        if c not in df.columns:
            if c == "kind":
                names = df["name"].astype(str)
                kinds = {x: "memcpy" if "memcpy" in x.lower() else "memset" if "memset" in x.lower() else "kernel"
                         for x in names.unique()}
                df[c] = names.map(kinds) if n else []
            else:
                df[c] = _UNKNOWN.get(c, "")
    extra = [c for c in ("sheet", "detail_module") if c in df.columns]
    return df[list(KERNEL_COLUMNS) + extra].reset_index(drop=True)
