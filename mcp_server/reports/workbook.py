"""A write-only openpyxl workbook: its sheets and how it is saved.

``Sheet`` appends rows to a write-only sheet: a styled header, bold, highlighted and title rows,
outline levels, and values cleaned so that openpyxl can store them (strings never become formulas).
``atomic_save`` saves the workbook atomically (``mcp_server.core.atomic``), giving every
worksheet the ``<dimension>`` element and padded rows that openpyxl's write-only mode leaves
out, and appends the full kernel table as raw XML (``fast_table``). The report layout that
fills these sheets is ``xlsx_writer``'s.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from mcp_server.core.atomic import atomic_target, new_temp, unlink_quietly
from mcp_server.core.vocab import KERNEL_COLUMNS
from mcp_server.reports.xlsx_patch import ILLEGAL_XML, col_index, col_letter


def _clean(v: Any) -> Any:
    """Values openpyxl can store: NaN -> None, numpy scalars -> Python, illegal XML chars removed."""
    if isinstance(v, str):
        return ILLEGAL_XML.sub("", v)
    if hasattr(v, "item") and not isinstance(v, (list, tuple)):
        try:
            v = v.item()
        except (AttributeError, ValueError):
            pass
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


class Sheet:
    """A write-only sheet with header styling and per-row outline levels."""

    def __init__(self, wb, title: str, widths: dict[str, float] | None = None):
        from openpyxl.styles import Font, PatternFill

        self.ws = wb.create_sheet(title=title)
        self.row = 0
        self._bold = Font(bold=True)
        self._title = Font(bold=True, size=12)
        self._fill = PatternFill(start_color="CCE5FF", end_color="CCE5FF", fill_type="solid")
        self._red = PatternFill(start_color="FFD7D7", end_color="FFD7D7", fill_type="solid")
        for col, w in (widths or {}).items():
            self.ws.column_dimensions[col].width = w

    def _cell(self, value, *, font=None, fill=None):
        from openpyxl.cell import WriteOnlyCell

        c = WriteOnlyCell(self.ws, value=_clean(value))
        if isinstance(value, str) and value.startswith("="):
            c.data_type = "s"
        if font is not None:
            c.font = font
        if fill is not None:
            c.fill = fill
        return c

    def header(self, values: list[Any]) -> None:
        self.append([self._cell(v, font=self._bold, fill=self._fill) for v in values], raw=True)

    def bold(self, values: list[Any]) -> None:
        self.append([self._cell(v, font=self._bold) if v is not None else None for v in values], raw=True)

    def highlight(self, values: list[Any]) -> None:
        """A row to look at first: every cell on a red fill."""
        self.append([self._cell(v, fill=self._red) for v in values], raw=True)

    def title(self, values: list[Any]) -> None:
        self.append([self._cell(values[0], font=self._title)] + list(values[1:]), raw=False)

    def append(self, values: list[Any], *, raw: bool = False, outline: int = 0) -> None:
        self.row += 1
        if outline:
            self.ws.row_dimensions[self.row].outline_level = outline
        if raw:
            self.ws.append(values)
            return
        self.ws.append([self.guard(v) for v in values])

    def guard(self, v: Any) -> Any:
        """A data value safe to append: strings never become formulas, odd values cleaned."""
        if isinstance(v, str):
            if v.startswith("=") or ILLEGAL_XML.search(v):
                return self._cell(v)
            return v
        return _clean(v)

    def blank(self) -> None:
        self.append([])


def atomic_save(wb, out: Path, full_tables: list | None = None, *, force: bool = False) -> None:
    """Save an openpyxl workbook to ``out`` atomically (``mcp_server.core.atomic``).

    ``full_tables``: [(sheet, DataFrame)] whose rows are appended below those sheets'
    header rows as raw XML (``fast_table``), from a first temp file into the final one.
    """
    try:
        _save(wb, out, full_tables, force)
    except BaseException:
        _discard(wb)
        raise


def _discard(wb) -> None:
    """Close a write-only workbook's sheets after a failed save (else their row writers
    print "Exception ignored ... I/O operation on closed file" when collected)."""
    for ws in getattr(wb, "_sheets", []):
        close = getattr(ws, "close", None)
        if close is None or getattr(ws, "closed", True):
            continue
        try:
            close()
        except Exception:  # noqa: BLE001 - best effort: the save already failed with a typed error
            pass


def _save(wb, out: Path, full_tables: list | None, force: bool) -> None:
    with atomic_target(out, what="report", force=force) as tmp:
        first = new_temp(out)
        try:
            wb.save(first)
            if not full_tables:
                add_dimensions(first, tmp)
                return
            from mcp_server.reports.fast_table import fill_full_tables

            second = new_temp(out)
            try:
                add_dimensions(first, second)
                fill_full_tables(second, tmp, full_tables, list(KERNEL_COLUMNS), target=str(out))
            finally:
                unlink_quietly(second)
        finally:
            unlink_quietly(first)


_ROW_RE = re.compile(rb'<row\b([^>]*?)(/>|>(.*?)</row>)', re.S)
_ROW_NUM_RE = re.compile(rb'\br="(\d+)"')
_CELL_REF_RE = re.compile(rb'<c\b[^>]*?\br="([A-Z]+)(\d+)"')


def _pad_sheet(xml: bytes) -> bytes:
    """One worksheet's XML with a ``<dimension>`` element and every row padded to its width.

    openpyxl's write-only mode writes neither; readers that users run (openpyxl in read-only
    mode, hence the upstream ``compare_analysis.py``) size rows by the dimension and yield an
    empty tuple for a blank row without it."""
    start = xml.find(b"<sheetData")
    end = xml.rfind(b"</sheetData>")
    if start < 0 or b"<dimension" in xml[:start]:
        return xml
    body_start = xml.find(b">", start) + 1
    if xml[body_start - 2:body_start] == b"/>":  # <sheetData/>: an empty sheet
        body, end = b"", body_start
    else:
        body = xml[body_start:end]
    rows: list[tuple[int, bytes, bytes]] = []
    width = 0
    for m in _ROW_RE.finditer(body):
        attrs, inner = m.group(1), m.group(3) or b""
        rn = _ROW_NUM_RE.search(attrs)
        r = int(rn.group(1)) if rn else (rows[-1][0] + 1 if rows else 1)
        refs = _CELL_REF_RE.findall(inner)
        if refs:
            width = max(width, col_index(refs[-1][0]) + 1)
        rows.append((r, attrs, inner))
    width = max(width, 1)
    last = rows[-1][0] if rows else 1
    out = []
    prev = 0
    for r, attrs, inner in rows:
        for gap in range(prev + 1, r):  # rows openpyxl skipped entirely
            out.append(b'<row r="%d"><c r="A%d"/></row>' % (gap, gap))
        refs = _CELL_REF_RE.findall(inner)
        have = col_index(refs[-1][0]) + 1 if refs else 0
        pad = b"".join(b'<c r="%s%d"/>' % (col_letter(i).encode(), r) for i in range(have, width))
        out.append(b"<row" + attrs + b">" + inner + pad + b"</row>")
        prev = r
    dim = b'<dimension ref="A1:%s%d"/>' % (col_letter(width - 1).encode(), last)
    head = xml[:start]
    pos = head.find(b"</sheetPr>")
    if pos >= 0:
        pos += len(b"</sheetPr>")
    else:
        pr = re.search(rb"<sheetPr\b[^>]*/>", head)
        pos = pr.end() if pr else head.find(b">", head.find(b"<worksheet")) + 1
    head = head[:pos] + dim + head[pos:]
    return head + b"<sheetData>" + b"".join(out) + b"</sheetData>" + xml[end + len(b"</sheetData>"):]


def add_dimensions(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Copy workbook ``src`` to ``dst`` with every worksheet given its dimension and padded rows."""
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED,
                                                      compresslevel=6) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.startswith("xl/worksheets/") and info.filename.endswith(".xml"):
                data = _pad_sheet(data)
            zout.writestr(info, data)
