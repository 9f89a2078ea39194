"""The sheets of a report workbook, one reader each (python-calamine: values only, fast).

Columns are found by their header text, never by position; a sheet or column that is missing
raises ``ReportFormatError`` naming the file, the sheet and what is missing. ``reader`` assembles
them into a ``Report``; ``edit`` uses the same low-level helpers to find the cells it rewrites.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Optional

import pandas as pd

from mcp_server.core.errors import ReportFormatError
from mcp_server.core.vocab import module_type
from mcp_server.reports import layout as L

Source = Literal["kernelscope", "upstream-old", "upstream-new"]


@dataclass
class DetailSheet:
    """One detail sheet's title facts and category table."""

    sheet: str
    layout: Literal["old", "new"]
    module: str = ""
    module_type: str = ""
    phase: str = ""
    variant: str = ""
    parent_path: str = ""
    title_count: Optional[int] = None
    kernel_sum_us: Optional[float] = None
    wall_us: Optional[float] = None
    overlap_us: Optional[float] = None
    categories: dict[str, float] = field(default_factory=dict)
    rows: int = 0
    truncated: bool = False


# --------------------------------------------------------------------------- low level


class _Book:
    """A calamine workbook with per-sheet row caching and file-named errors."""

    def __init__(self, path: str):
        from python_calamine import CalamineWorkbook

        from mcp_server.reports.guard import check_xlsx

        self.path = path
        check_xlsx(path)  # sizes, ratios, CRCs, sheet grid and shared strings before calamine sees it
        try:
            self.wb = CalamineWorkbook.from_path(path)
        except Exception as exc:  # calamine raises several types for bad files
            raise ReportFormatError(f"not a readable xlsx workbook ({type(exc).__name__}: {exc})", path=path) from None
        self.names = list(self.wb.sheet_names)
        self._cache: dict[str, list[list[Any]]] = {}

    def rows(self, sheet: str) -> list[list[Any]]:
        if sheet not in self._cache:
            if sheet not in self.names:
                raise ReportFormatError(f"sheet '{sheet}' is missing (sheets: {', '.join(self.names)})", path=self.path)
            try:
                self._cache[sheet] = self.wb.get_sheet_by_name(sheet).to_python(skip_empty_area=False)
            except Exception as exc:
                raise ReportFormatError(f"sheet '{sheet}' cannot be read ({exc})", path=self.path) from None
        return self._cache[sheet]

    def prefetch(self, sheets: list[str]) -> None:
        """Parse several sheets on two worker threads (calamine parses without the GIL)."""
        todo = [s for s in sheets if s not in self._cache and s in self.names]
        if len(todo) < 4:
            return
        import threading
        from concurrent.futures import ThreadPoolExecutor

        from python_calamine import CalamineWorkbook

        local = threading.local()

        def one(name: str):
            wb = getattr(local, "wb", None)
            if wb is None:
                wb = local.wb = CalamineWorkbook.from_path(self.path)
            try:
                return name, wb.get_sheet_by_name(name).to_python(skip_empty_area=False)
            except Exception:
                return name, None  # rows() re-reads it and raises the typed error

        with ThreadPoolExecutor(max_workers=2) as ex:
            for name, rows in ex.map(one, todo):
                if rows is not None:
                    self._cache[name] = rows

    def missing(self, sheet: str, what: str) -> ReportFormatError:
        return ReportFormatError(f"sheet '{sheet}': {what}", path=self.path)

    def headed(self, sheet: str, cols: Iterable[str], empty: str = "empty sheet",
               ) -> tuple[list[list[Any]], dict[str, int]]:
        """A sheet whose row 1 is its header: its rows and the header's column -> index; a typed error when
        the sheet is empty (``empty`` says so) or the header lacks one of ``cols``."""
        rows = self.rows(sheet)
        if not rows:
            raise self.missing(sheet, empty)
        idx = _header_index(rows[0])
        _require(self, sheet, idx, cols, 1)
        return rows, idx


def _s(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v).strip()


def _cell(row: list[Any], i: Optional[int]) -> Any:
    if i is None or i >= len(row):
        return ""
    return row[i]


def _header_index(row: list[Any]) -> dict[str, int]:
    idx: dict[str, int] = {}
    for i, v in enumerate(row):
        t = _s(v)
        if t and t not in idx:
            idx[t] = i
    return idx


def _require(book: _Book, sheet: str, idx: dict[str, int], cols: Iterable[str], row_no: int) -> None:
    miss = [c for c in cols if c not in idx]
    if miss:
        raise book.missing(sheet, f"missing column(s) {', '.join(repr(c) for c in miss)} in the header row {row_no}"
                           f" (found: {', '.join(repr(k) for k in idx) or 'nothing'})")


def _find_header(rows: list[list[Any]], first: str, must: str, start: int = 0) -> Optional[int]:
    for i in range(start, len(rows)):
        r = rows[i]
        if r and _s(r[0]) == first and any(_s(v) == must for v in r):
            return i
    return None


def _num(v: Any, default: float = 0.0) -> float:
    x = L.parse_number(v)
    return default if x is None else x


def _count(book: "_Book", sheet: str, row: int, v: Any) -> int:
    """A count cell as int; a value that is not a finite number (``NaN``, ``1e999``) is a typed error."""
    x = _num(v)
    if not math.isfinite(x) or abs(x) > 2**53:
        raise book.missing(sheet, f"row {row}: a count that is not a finite whole number")
    return int(x)


# --------------------------------------------------------------------------- sheets


def _read_gpu_kernels(book: _Book) -> tuple[pd.DataFrame, bool]:
    sheet = L.GPU_KERNELS
    rows, idx = book.headed(sheet, L.GPU_KERNELS_REQUIRED,
                            "empty sheet (expected the header row 'Kernel Name, Category, ...')")
    ni, ci, ti, ki = (idx[c] for c in L.GPU_KERNELS_REQUIRED)
    ai, pi, mi = idx.get("Avg (us)"), idx.get("% of Total"), idx.get("Module Types")
    out: dict[str, list] = {k: [] for k in ("name", "category", "total_us", "count", "avg_us", "pct_total",
                                            "module_types", "row")}
    truncated = False
    for rn, r in enumerate(rows[1:], start=2):
        name = _s(_cell(r, ni))
        if not name:
            continue
        if name.startswith(L.TRUNCATED_PREFIX):
            truncated = True
            break
        total = _num(_cell(r, ti))
        cnt = _count(book, sheet, rn, _cell(r, ki))
        out["name"].append(name)
        out["category"].append(_s(_cell(r, ci)))
        out["total_us"].append(total)
        out["count"].append(cnt)
        out["avg_us"].append(_num(_cell(r, ai), total / cnt if cnt else 0.0))
        out["pct_total"].append(_num(_cell(r, pi)))
        out["module_types"].append(_s(_cell(r, mi)))
        out["row"].append(rn)
    return pd.DataFrame(out), truncated


def _category_header(book: _Book, rows: list[list[Any]], start: int = 0) -> tuple[int, dict[str, int]]:
    """Row and header index of the Summary's category table (found from row ``start``); a typed error without it."""
    c = _find_header(rows, "Category", "Total (us)", start)
    if c is None:
        raise book.missing(L.SUMMARY, "category table header 'Category, Count, Total (us), Avg (us), Percentage' "
                                      "not found")
    idx = _header_index(rows[c])
    _require(book, L.SUMMARY, idx, ["Category", "Total (us)"], c + 1)
    return c, idx


def _read_summary(book: _Book) -> tuple[pd.DataFrame, pd.DataFrame, Optional[float]]:
    sheet = L.SUMMARY
    rows = book.rows(sheet)
    h = _find_header(rows, "Metric", "Value (us)")
    total: Optional[float] = None
    mods: dict[str, list] = {"label": [], "total_us": [], "pct": [], "detail_tab": [], "row": []}
    if h is not None:
        idx = _header_index(rows[h])
        vi, pi, di = idx.get("Value (us)"), idx.get("Percentage"), idx.get("Detail Tab")
        for rn in range(h + 1, len(rows)):
            r = rows[rn]
            label = _s(_cell(r, 0))
            if not label:
                break
            if label == L.SUMMARY_TOTAL_LABEL:
                total = L.parse_number(_cell(r, vi))
                continue
            mods["label"].append(str(_cell(r, 0)))
            mods["total_us"].append(_num(_cell(r, vi)))
            mods["pct"].append(_num(_cell(r, pi)))
            mods["detail_tab"].append(_s(_cell(r, di)))
            mods["row"].append(rn + 1)
    c, idx = _category_header(book, rows, 0 if h is None else h + 1)
    ki, ti, ai, pi = idx.get("Count"), idx["Total (us)"], idx.get("Avg (us)"), idx.get("Percentage")
    cats: dict[str, list] = {"category": [], "count": [], "total_us": [], "avg_us": [], "pct": [], "row": []}
    for rn in range(c + 1, len(rows)):
        r = rows[rn]
        name = _s(_cell(r, idx["Category"]))
        if not name:
            break
        cats["category"].append(name)
        cats["count"].append(_count(book, sheet, rn + 1, _cell(r, ki)))
        cats["total_us"].append(_num(_cell(r, ti)))
        cats["avg_us"].append(_num(_cell(r, ai)))
        cats["pct"].append(_num(_cell(r, pi)))
        cats["row"].append(rn + 1)
    return pd.DataFrame(cats), pd.DataFrame(mods), total


def _split_label(label: str) -> tuple[int, str]:
    """Depth and name from an indented ``    ├── Name`` label."""
    for glyph in ("├── ", "└── "):
        pos = label.find(glyph)
        if pos >= 0:
            return pos // 4, label[pos + len(glyph):].strip()
    return 0, label.strip()


def _read_tree(book: _Book) -> pd.DataFrame:
    sheet = L.MODULE_TREE
    rows, idx = book.headed(sheet, ["Module", "Total Time (us)", "Breakdown"])
    mi, ti, ki, bi = idx["Module"], idx["Total Time (us)"], idx.get("Kernels/Ops"), idx["Breakdown"]
    phi, pai = idx.get("Phase"), idx.get(L.TREE_PATH_HEADER)
    out: dict[str, list] = {k: [] for k in ("module", "module_type", "depth", "total_us", "kernel_count",
                                            "breakdown", "phase", "path", "row")}
    stack: list[str] = []
    for rn, r in enumerate(rows[1:], start=2):
        label = str(_cell(r, mi) or "")
        if not label.strip() or label.startswith(L.TRUNCATED_PREFIX):
            continue
        depth, name = _split_label(label)
        stack = stack[:depth] + [name]
        path = _s(_cell(r, pai)) or "/".join(stack)
        out["module"].append(name)
        out["module_type"].append(module_type(name))
        out["depth"].append(depth)
        out["total_us"].append(_num(_cell(r, ti)))
        out["kernel_count"].append(_count(book, sheet, rn, _cell(r, ki)))
        out["breakdown"].append(_s(_cell(r, bi)))
        out["phase"].append(_s(_cell(r, phi)))
        out["path"].append(path)
        out["row"].append(rn)
    return pd.DataFrame(out)


def _read_overview(book: _Book) -> pd.DataFrame:
    sheet = L.OVERVIEW
    rows, idx = book.headed(sheet, ["Module Type", "Total (us)"])
    cols = {"Module Type": "label", "Depth": "depth", "Count": "count", "Mean (us)": "mean_us", "Std (us)": "std_us",
            "Min (us)": "min_us", "Max (us)": "max_us", "Total (us)": "total_us", "% of Parent": "pct_of_parent",
            "Top Kernel": "top_kernel"}
    out: dict[str, list] = {v: [] for v in cols.values()}
    out["module_type"] = []
    for r in rows[1:]:
        label = str(_cell(r, idx["Module Type"]) or "")
        if not label.strip():
            continue
        for h, k in cols.items():
            v = _cell(r, idx.get(h))
            out[k].append(label if k == "label" else (_s(v) if k == "top_kernel" else _num(v)))
        out["module_type"].append(_split_label(label)[1])
    return pd.DataFrame(out)


def _read_metadata(book: _Book) -> dict[str, str]:
    if L.METADATA not in book.names:
        return {}
    rows = book.rows(L.METADATA)
    out: dict[str, str] = {}
    for r in rows[1:]:
        k = _s(_cell(r, 0))
        if k:
            out[k] = _s(_cell(r, 1))
    return out


def _detail_title(rows: list[list[Any]]) -> Optional[tuple[Literal["old", "new"], str, str, Optional[int], str]]:
    """(layout, instance name, phase from title, count, parent path) or None if not a detail title."""
    if not rows:
        return None
    r0 = rows[0]
    a1 = _s(_cell(r0, 0))
    b1 = _cell(r0, 1)
    b1_is_count = (isinstance(b1, (int, float)) and not isinstance(b1, bool) and math.isfinite(b1)) or (
        isinstance(b1, str) and b1.strip().isdigit())
    if a1 and b1_is_count:
        return "new", a1, "", int(_num(b1)), _s(_cell(r0, 2))
    m = L.OLD_TITLE_RE.match(a1)
    if m:
        return "old", m.group("name").strip(), m.group("phase") or "", int(m.group("count")), ""
    return None


def _is_detail(book: _Book, sheet: str) -> bool:
    if sheet in L.NON_DETAIL_SHEETS or L.is_full_table_sheet(sheet):
        return False
    rows = book.rows(sheet)
    if _detail_title(rows) is not None:
        return True
    return len(rows) > 1 and _s(_cell(rows[1], 0)).startswith("Kernel sum:")


def _read_detail(book: _Book, sheet: str, want_rows: bool) -> tuple[DetailSheet, Optional[dict[str, list]]]:
    rows = book.rows(sheet)
    t = _detail_title(rows)
    if t is None:
        raise book.missing(sheet, "row 1 is neither the older title '<name> [phase] — N kernels' nor the newer "
                                  "'name | count | parent path'")
    lay, inst, tphase, count, parent = t
    base, sphase, variant = L.parse_detail_sheet_name(sheet)
    phase = sphase or tphase
    mtype = module_type(inst) or base
    ds = DetailSheet(sheet=sheet, layout=lay, module=inst, module_type=mtype, phase=phase, variant=variant,
                     parent_path=parent, title_count=count)
    if len(rows) > 1:
        info = _s(_cell(rows[1], 0))
        for attr, rx in (("kernel_sum_us", L.KERNEL_SUM_RE), ("wall_us", L.WALL_RE), ("overlap_us", L.OVERLAP_RE)):
            m = rx.search(info)
            if m:
                setattr(ds, attr, float(m.group(1).replace(",", "")))
    ch = _find_header(rows, "Category", "Total Duration (us)", 1)
    kh = _find_header(rows, "Module", "Kernel Name", 1)
    if kh is None:
        raise book.missing(sheet, "kernel table header row ('Module, Input Dims, Kernel Name, Duration (us), ...') "
                                  "not found")
    if ch is not None and ch < kh:
        cidx = _header_index(rows[ch])
        ti = cidx.get("Total Duration (us)")
        for rn in range(ch + 1, kh):
            r = rows[rn]
            name = _s(_cell(r, 0))
            if not name:
                break
            if name == "Total":
                continue
            ds.categories[name] = _num(_cell(r, ti))
    idx = _header_index(rows[kh])
    _require(book, sheet, idx, L.DETAIL_REQUIRED, kh + 1)
    mi, ni, di, ci = (idx[c] for c in L.DETAIL_REQUIRED)
    ii = idx.get("Input Dims")
    si = idx.get("Source", idx.get("Path"))
    body = rows[kh + 1:]
    trunc = L.TRUNCATED_PREFIX
    for i, r in enumerate(body):
        f = r[0] if r else ""
        if type(f) is str and f.startswith(trunc):
            ds.truncated = True
            body = body[:i]
            break
    names = _text_col(body, ni)
    keep = [i for i, x in enumerate(names) if x]
    n = len(keep)
    out: Optional[dict[str, list]] = None
    if want_rows:
        if n != len(body):
            body = [body[i] for i in keep]
            names = [names[i] for i in keep]
        out = {"name": names, "category": _text_col(body, ci), "dur_us": _num_col(body, di),
               "module": _text_col(body, mi), "input_dims": _text_col(body, ii), "source": _text_col(body, si),
               "row": [kh + 2 + i for i in keep]}
    ds.rows = n
    if count is not None and count > n and not ds.truncated and n >= L.MAX_ROWS:
        ds.truncated = True
    return ds, out


def _text_col(body: list[list[Any]], i: Optional[int]) -> list[str]:
    """Column ``i`` of calamine rows as stripped text ('' where absent)."""
    if i is None:
        return [""] * len(body)
    if all(len(r) > i for r in body):  # calamine rows are rectangular: one pass, no bounds check
        return [x.strip() if type(x) is str else _s(x) for x in (r[i] for r in body)]
    return [x.strip() if type(x) is str else _s(x) for x in (r[i] if i < len(r) else "" for r in body)]


def _num_col(body: list[list[Any]], i: Optional[int]) -> list[float]:
    if i is None:
        return [0.0] * len(body)
    out = [r[i] if i < len(r) else "" for r in body]
    return [float(x) if type(x) in (float, int) else _num(x) for x in out]


def _read_full(book: _Book) -> pd.DataFrame:
    from mcp_server.core.vocab import KERNEL_COLUMNS

    frames = []
    for sheet in [s for s in book.names if L.is_full_table_sheet(s)]:
        rows, idx = book.headed(sheet, ["name", "category", "dur_us"],
                                "empty sheet (expected the kernel columns header)")
        width = max((len(r) for r in rows[:1]), default=0)
        data = rows[1:]
        if any(len(r) != width for r in data[:1]):
            data = [list(r) + [""] * (width - len(r)) for r in data]
        frame = pd.DataFrame(data, columns=list(range(width))) if data else pd.DataFrame(columns=list(range(width)))
        frames.append(pd.DataFrame({c: frame[i] for c, i in idx.items()}))
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    for c in KERNEL_COLUMNS:
        if c not in df.columns:
            df[c] = _UNKNOWN.get(c, "")
    for c in ("ts_us", "dur_us", "confidence"):
        df[c] = pd.to_numeric(df[c], errors="coerce").fillna(-1.0).astype(float)
    for c in ("device", "stream", "correlation", "layer"):
        df[c] = pd.to_numeric(df[c], errors="coerce").fillna(-1).astype("int64")
    g = df["graph"]
    df["graph"] = g.astype(bool) if pd.api.types.is_bool_dtype(g) else g.map(
        lambda v: v is True or str(v).lower() == "true")
    for c in KERNEL_COLUMNS:
        if c not in ("ts_us", "dur_us", "confidence", "device", "stream", "correlation", "layer", "graph"):
            col = df[c]
            if len(col) and pd.api.types.infer_dtype(col, skipna=False) != "string":
                df[c] = col.map(_s)
    return df


_UNKNOWN: dict[str, Any] = {"ts_us": -1.0, "dur_us": -1.0, "device": -1, "stream": -1, "correlation": -1,
                            "graph": False, "confidence": -1.0, "layer": -1}



def detect_source(book: _Book) -> Source:
    """Who wrote the workbook: ``kernelscope`` (``layout.is_kernelscope_workbook``), else the upstream
    layout told by the first detail sheet's title row (``upstream-new`` / ``upstream-old``)."""
    if L.is_kernelscope_workbook(book.names):
        return "kernelscope"
    for s in book.names:
        if s in L.NON_DETAIL_SHEETS:
            continue
        t = _detail_title(book.rows(s))
        if t is not None:
            return "upstream-new" if t[0] == "new" else "upstream-old"
    return "upstream-old"
