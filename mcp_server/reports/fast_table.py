"""Write the uncapped kernel table sheets straight as worksheet XML.

openpyxl spends microseconds per cell, which makes a million-kernel table
take minutes. The writer lets openpyxl write every sheet (the full-table
sheets with their styled header row only) and then ``fill_full_tables``
streams the workbook into a new zip, appending the data rows to those sheets.
Rows are built column-wise with numpy object arrays (one ``str.join`` per
chunk); text goes through a shared-strings table (``xl/sharedStrings.xml``),
so a kernel name repeated a million times is stored once and cells stay small.
"""
from __future__ import annotations

import re
import zipfile
from typing import Sequence

import numpy as np
import pandas as pd

from mcp_server.core.errors import WriteError
from mcp_server.reports.xlsx_patch import col_letter, sheet_parts, xml_text

CHUNK_ROWS = 50_000
_SST_CT = "application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"
_SST_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings"


class _Strings:
    """The shared-strings table: text -> index."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.count = 0

    def codes_for(self, values: Sequence[str]) -> np.ndarray:
        out = np.empty(len(values), dtype=np.int64)
        idx = self.index
        for i, v in enumerate(values):
            k = idx.get(v)
            if k is None:
                k = idx[v] = len(idx)
            out[i] = k
        return out

    def xml(self) -> bytes:
        parts = [f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<sst xmlns='
                 f'"http://schemas.openxmlformats.org/spreadsheetml/2006/main" count="{self.count}" '
                 f'uniqueCount="{len(self.index)}">']
        for s in self.index:  # insertion order = index order
            e = xml_text(s)
            space = ' xml:space="preserve"' if e != e.strip() else ""
            parts.append(f"<si><t{space}>{e}</t></si>")
        parts.append("</sst>")
        return "".join(parts).encode("utf-8")


def _column_slots(s: pd.Series, sst: _Strings) -> tuple[np.ndarray, np.ndarray]:
    """Per column: the constant/array slots making up each row's cell (empty cells left out).

    Returns (slots, empty-mask); slots are [prefix const, value array]; the row
    number is inserted between ``<c r="L`` and the rest by the caller.
    """
    n = len(s)
    if isinstance(s.dtype, pd.CategoricalDtype):
        return _shared_strings([("" if c is None else str(c)) for c in s.cat.categories], s.cat.codes.to_numpy(), sst)
    if s.dtype == bool or s.dtype == np.bool_:
        v = s.to_numpy()
        return np.where(v, '" t="b"><v>1</v></c>', '" t="b"><v>0</v></c>').astype(object), np.zeros(n, bool)
    if pd.api.types.is_integer_dtype(s.dtype):
        v = s.to_numpy().astype(str).astype(object)
        return '"><v>' + v + "</v></c>", np.zeros(n, bool)
    if pd.api.types.is_float_dtype(s.dtype):
        arr = s.to_numpy(dtype=float)
        empty = ~np.isfinite(arr)
        v = np.array([repr(x) for x in arr.tolist()], dtype=object)
        return '"><v>' + v + "</v></c>", empty
    # object / string: through the shared strings
    vals = ["" if (x is None or (isinstance(x, float) and x != x)) else
            (x if isinstance(x, str) else str(x)) for x in s.tolist()]
    codes, uniq = pd.factorize(np.array(vals, dtype=object))
    return _shared_strings(list(uniq), codes, sst)


def _shared_strings(texts: list[str], codes: np.ndarray, sst: _Strings) -> tuple[np.ndarray, np.ndarray]:
    """The slots of a column whose row i holds ``texts[codes[i]]`` (code -1: no value), through the shared strings."""
    frag = np.array([f'" t="s"><v>{k}</v></c>' for k in sst.codes_for(texts)] + [""], dtype=object)
    empty = np.array([t == "" for t in texts] + [True])[codes]  # code -1 takes the last entry: empty
    sst.count += int((~empty).sum())
    return frag[codes], empty


def _rows_xml(df: pd.DataFrame, cols: list[str], first_row: int, sst: _Strings):
    """Yield UTF-8 chunks of ``<row>`` elements for ``df`` starting at sheet row ``first_row``."""
    n = len(df)
    col_data = []
    for j, c in enumerate(cols):
        letter = col_letter(j)
        if c in df.columns:
            vals, empty = _column_slots(df[c], sst)
        else:
            vals, empty = np.full(n, "", dtype=object), np.ones(n, bool)
        col_data.append((f'<c r="{letter}', vals, empty))
    width = 3 + 3 * len(cols) + 1
    for s0 in range(0, n, CHUNK_ROWS):
        e = min(n, s0 + CHUNK_ROWS)
        k = e - s0
        rs = np.arange(first_row + s0, first_row + e).astype(str).astype(object)
        arr = np.empty((k, width), dtype=object)
        arr[:, 0] = '<row r="'
        arr[:, 1] = rs
        arr[:, 2] = '">'
        j = 3
        for prefix, vals, empty in col_data:
            em = empty[s0:e]
            if em.any():
                arr[:, j] = np.where(em, "", prefix)
                arr[:, j + 1] = np.where(em, "", rs)
                arr[:, j + 2] = np.where(em, "", vals[s0:e])
            else:
                arr[:, j] = prefix
                arr[:, j + 1] = rs
                arr[:, j + 2] = vals[s0:e]
            j += 3
        arr[:, -1] = "</row>"
        yield "".join(arr.ravel().tolist()).encode("utf-8")


def fill_full_tables(src: str, dst: str, parts: list[tuple[str, pd.DataFrame]], cols: list[str], *,
                     target: str | None = None) -> None:
    """Copy workbook ``src`` to ``dst``, appending each (sheet, rows) of ``parts`` below its header row.

    ``target``: the report's final path, named in errors (``src`` and ``dst`` are temp files).
    """
    sst = _Strings()
    with zipfile.ZipFile(src) as zin:
        members = sheet_parts(zin, src)
        targets = {members[s]: (s, d) for s, d in parts}
        if "xl/sharedStrings.xml" in zin.namelist():  # openpyxl's write-only mode writes inline strings only
            raise WriteError("cannot append the full kernel table: the workbook openpyxl wrote has a "
                             "shared-strings part (this writer expects inline strings only)", path=target or dst,
                             hint="an openpyxl version that changed write-only mode; install openpyxl 3.1")
        with zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1,
                             allowZip64=True) as zout:
            for info in zin.infolist():
                if info.filename in targets:
                    sheet, d = targets[info.filename]
                    xml = zin.read(info)
                    cut = xml.rindex(b"</sheetData>")
                    last = 1 + len(d)
                    ref = f"A1:{col_letter(len(cols) - 1)}{last}".encode()
                    head = re.sub(rb'(<dimension\b[^>]*\bref=")[^"]*(")', rb"\g<1>" + ref + rb"\g<2>", xml[:cut],
                                  count=1)
                    zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                    zi.compress_type = zipfile.ZIP_DEFLATED
                    with zout.open(zi, "w", force_zip64=True) as w:
                        w.write(head)
                        for chunk in _rows_xml(d, cols, 2, sst):
                            w.write(chunk)
                        w.write(xml[cut:])
                    continue
                data = zin.read(info)
                if info.filename == "[Content_Types].xml":
                    data = data.replace(b"</Types>", f'<Override PartName="/xl/sharedStrings.xml" '
                                                   f'ContentType="{_SST_CT}"/></Types>'.encode())
                elif info.filename == "xl/_rels/workbook.xml.rels":
                    data = data.replace(b"</Relationships>", f'<Relationship Id="rIdKsSst" Type="{_SST_REL}" '
                                                             f'Target="sharedStrings.xml"/></Relationships>'.encode())
                zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                zi.compress_type = info.compress_type
                zi.external_attr = info.external_attr
                zout.writestr(zi, data)
            zout.writestr("xl/sharedStrings.xml", sst.xml())
