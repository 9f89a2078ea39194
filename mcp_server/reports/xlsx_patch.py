"""Edit cells of an existing xlsx in place of openpyxl's full load/save.

An xlsx is a zip of XML parts. ``patch_workbook`` rewrites only the worksheet
parts that have edits; every other part is copied unchanged, and inside an
edited sheet only the touched rows (and the row numbers of rows after an
inserted/removed block) change, so formatting (styles, widths, outline
levels, fonts) is preserved. New string values are written as inline strings
(``t="inlineStr"``), which Excel, openpyxl and calamine all read.
"""
from __future__ import annotations

import posixpath
import re
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any, Optional
from xml.sax.saxutils import escape

from mcp_server.core.atomic import atomic_target
from mcp_server.core.errors import ReportFormatError

_ROW_RE = re.compile(rb"<row\b[^>]*?(?:/>|>.*?</row>)", re.S)
_ROW_R_RE = re.compile(rb'\br="(\d+)"')
_CELL_RE = re.compile(rb"<c\b[^>]*?(?:/>|>.*?</c>)", re.S)
_CELL_REF_RE = re.compile(rb'\br="([A-Z]+)(\d+)"')
_CELL_S_RE = re.compile(rb'\bs="(\d+)"')
_REFS_AFTER_RE = re.compile(rb'\b(ref|sqref)="([^"]*)"')
_REF_SPLIT_RE = re.compile(rb'( r="[A-Z]*)(\d+)(?=")')  # attributes separated by a space (the usual)
_REF_SPLIT_WS_RE = re.compile(rb'(\sr="[A-Z]*)(\d+)(?=")')  # any whitespace (slower)
_A1_RE = re.compile(rb"([A-Z]{1,3})(\d+)")
_DIM_RE = re.compile(rb'(<dimension\b[^>]*\bref=")([^"]*)(")')
_SPANS_RE = re.compile(rb'\sspans="[^"]*"')
_SHEET_RE = re.compile(rb"<sheet\b[^>]*?/>", re.S)
_ATTR_RE = re.compile(rb'([\w:]+)="([^"]*)"')
_REL_RE = re.compile(rb"<Relationship\b[^>]*?/>", re.S)
#: the characters XML 1.0 cannot hold (the same set openpyxl refuses)
ILLEGAL_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def col_letter(idx0: int) -> str:
    """0-based column index -> letters (0 -> A)."""
    s = ""
    n = idx0 + 1
    while n:
        n, r = divmod(n - 1, 26)
        s = chr(65 + r) + s
    return s


def col_index(letters: bytes) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + (ch - 64)
    return n - 1


def xml_text(v: str) -> str:
    """Text as XML character data: illegal characters dropped, ``&``, ``<``, ``>`` escaped."""
    return escape(ILLEGAL_XML.sub("", v))


def cell_xml(ref: str, value: Any, style: Optional[bytes]) -> bytes:
    s_attr = b' s="' + style + b'"' if style else b""
    r = ref.encode()
    if value is None or value == "":
        return b'<c r="' + r + b'"' + s_attr + b"/>"
    if isinstance(value, bool):
        return b'<c r="' + r + b'"' + s_attr + b' t="b"><v>' + (b"1" if value else b"0") + b"</v></c>"
    if isinstance(value, (int, float)):
        txt = str(int(value)) if isinstance(value, int) else repr(float(value))
        return b'<c r="' + r + b'"' + s_attr + b"><v>" + txt.encode() + b"</v></c>"
    text = str(value)
    space = b' xml:space="preserve"' if text != text.strip() else b""
    return (b'<c r="' + r + b'"' + s_attr + b' t="inlineStr"><is><t' + space + b">" + xml_text(text).encode()
            + b"</t></is></c>")


def _open_tag(row_xml: bytes) -> bytes:
    """A row's opening tag, to be followed by its cells: never self-closed, and without ``spans`` (they go stale)."""
    tag = row_xml[:row_xml.index(b">") + 1]
    if tag.endswith(b"/>"):
        tag = tag[:-2] + b">"
    return _SPANS_RE.sub(b"", tag)


@dataclass
class _Row:
    num: int
    xml: bytes
    cells: Optional[list[list]] = None  # [col, xml] parsed on demand
    dirty: bool = False
    blob_first: Optional[int] = None  # set when this holds several raw rows (blob_first..num)


class SheetXml:
    """One worksheet part, editable by (row, column) with 1-based rows and 0-based columns."""

    def __init__(self, data: bytes, name: str = ""):
        self.name = name
        start = data.find(b"<sheetData")
        if start < 0:
            raise ReportFormatError(f"sheet '{name}': worksheet XML has no sheetData")
        tag_end = data.index(b">", start)
        if data[tag_end - 1:tag_end] == b"/":  # <sheetData/>
            self.head = data[:start] + b"<sheetData>"
            body = b""
            self.tail = b"</sheetData>" + data[tag_end + 1:]
        else:
            end = data.index(b"</sheetData>", tag_end)
            self.head = data[:tag_end + 1]
            body = data[tag_end + 1:end]
            self.tail = data[end:]
        self._has_blob = False
        odd = b'\tr="' in body or b'\nr="' in body or b'\rr="' in body
        self._ref_re = _REF_SPLIT_WS_RE if odd else _REF_SPLIT_RE
        self.rows: list[_Row] = self._split_rows(body)
        self._index = {r.num: i for i, r in enumerate(self.rows)}
        self.changed = False

    def _split_rows(self, body: bytes) -> list[_Row]:
        rows: list[_Row] = []
        last = 0
        pieces = body.split(b"<row")
        if pieces and pieces[0].strip():
            raise ReportFormatError(f"sheet '{self.name}': unexpected content before the first row")
        seps = (b" ", b">", b"/", b"\t", b"\n", b"\r")
        for piece in pieces[1:]:
            if piece[:1] not in seps:
                raise ReportFormatError(f"sheet '{self.name}': unexpected element in sheetData")
            open_end = piece.find(b">")
            k = piece.find(b' r="', 0, open_end)
            if k >= 0:
                last = int(piece[k + 4:piece.index(b'"', k + 4)])
                rows.append(_Row(last, b"<row" + piece))
                continue
            xml = b"<row" + piece
            rm = _ROW_R_RE.search(xml, 0, open_end + 5)
            num = int(rm.group(1)) if rm else last + 1
            if not rm:  # make the row number explicit so later shifts can rewrite it
                xml = xml[:4] + b' r="' + str(num).encode() + b'"' + xml[4:]
            last = num
            rows.append(_Row(num, xml))
        return rows

    def _shift_rows(self, rows: list[_Row], delta: int) -> list[_Row]:
        """Renumber ``rows`` by ``delta``: one split over their XML, numbers mapped through a dict."""
        if not rows:
            return rows
        chunk = b"".join(self._row_xml(r) for r in rows)
        parts = self._ref_re.split(chunk)
        nums = parts[2::3]
        mp = {d: str(int(d) + delta).encode() for d in set(nums)}
        parts[2::3] = [mp[d] for d in nums]
        # kept as one raw block (re-split only if a later edit needs a row inside it)
        first_num = rows[0].num + delta
        last_num = rows[-1].num + delta
        self._has_blob = True
        return [_Row(last_num, b"".join(parts), blob_first=first_num)]

    def _materialize(self) -> None:
        if self._has_blob:
            self._has_blob = False
            out: list[_Row] = []
            for r in self.rows:
                out.extend(self._split_rows(r.xml) if r.blob_first is not None else [r])
            self.rows = out
            self._index = {r.num: i for i, r in enumerate(self.rows)}

    # ---------------------------------------------------------------- cells

    def _cells(self, row: _Row) -> list[list]:
        if row.cells is None:
            cells = []
            body_start = row.xml.index(b">") + 1
            if row.xml[body_start - 2:body_start] == b"/>":
                row.cells = []
                return row.cells
            nxt = 0
            for m in _CELL_RE.finditer(row.xml, body_start):
                cx = m.group(0)
                rm = _CELL_REF_RE.search(cx, 0, cx.index(b">") + 1)
                col = col_index(rm.group(1)) if rm else nxt
                nxt = col + 1
                cells.append([col, cx])
            row.cells = cells
        return row.cells

    def _row(self, num: int, create: bool = True) -> Optional[_Row]:
        self._materialize()
        i = self._index.get(num)
        if i is not None:
            return self.rows[i]
        if not create:
            return None
        new = _Row(num, b'<row r="' + str(num).encode() + b'"></row>', cells=[], dirty=True)
        pos = 0
        while pos < len(self.rows) and self.rows[pos].num < num:
            pos += 1
        self.rows.insert(pos, new)
        self._index = {r.num: i for i, r in enumerate(self.rows)}
        return new

    def set_cell(self, num: int, col: int, value: Any, style: Optional[bytes] = None) -> None:
        row = self._row(num)
        assert row is not None  # _row creates the row when absent
        ref = f"{col_letter(col)}{num}"
        if row.cells is None and not row.dirty and self._set_in_place(row, ref, value, style):
            self.changed = True
            return
        cells = self._cells(row)
        for cell in cells:
            if cell[0] == col:
                if style is None:
                    m = _CELL_S_RE.search(cell[1], 0, cell[1].index(b">") + 1)
                    style = m.group(1) if m else None
                cell[1] = cell_xml(ref, value, style)
                break
        else:
            cells.append([col, cell_xml(ref, value, style)])
            cells.sort(key=lambda c: c[0])
        row.dirty = True
        self.changed = True

    def _set_in_place(self, row: _Row, ref: str, value: Any, style: Optional[bytes]) -> bool:
        """Replace one existing cell inside an unparsed row by byte search; False if not found."""
        xml = row.xml
        key = b' r="' + ref.encode() + b'"'
        k = xml.find(key)
        if k < 0:
            return False
        start = xml.rfind(b"<c", 0, k)
        if start < 0 or xml[start + 2:start + 3] not in (b" ", b"\t", b"\n", b"\r"):
            return False
        tag_end = xml.index(b">", k)
        if xml[tag_end - 1:tag_end] == b"/":
            end = tag_end + 1
        else:
            end = xml.find(b"</c>", tag_end)
            if end < 0:
                return False
            end += 4
        if style is None:
            m = _CELL_S_RE.search(xml, start, tag_end + 1)
            style = m.group(1) if m else None
        row.xml = xml[:start] + cell_xml(ref, value, style) + xml[end:]
        return True

    # ---------------------------------------------------------------- blocks

    def replace_rows(self, first: int, last: int, new_rows: list[list[Any]]) -> int:
        """Replace rows ``first..last`` (inclusive) by ``new_rows`` (lists of values from column A).

        Styles and row attributes come from the first replaced row (the last one for
        rows beyond the old count). Rows after the block move by the size difference,
        which is returned.
        """
        self._materialize()
        old = [r for r in self.rows if first <= r.num <= last]
        templates = []
        for r in old:
            styles = {c: (_CELL_S_RE.search(cx, 0, cx.index(b">") + 1) or [None, None])[1]
                      for c, cx in self._cells(r)}
            templates.append((_open_tag(r.xml), styles))
        if not templates:
            templates = [(b'<row r="0">', {})]
        delta = len(new_rows) - (last - first + 1)
        built: list[_Row] = []
        for i, values in enumerate(new_rows):
            open_tag, styles = templates[min(i, len(templates) - 1)]
            num = first + i
            open_tag = _ROW_R_RE.sub(b'r="' + str(num).encode() + b'"', open_tag, count=1)
            cells = [[c, cell_xml(f"{col_letter(c)}{num}", v, styles.get(c))] for c, v in enumerate(values)
                     if v is not None or styles.get(c)]
            built.append(_Row(num, open_tag + b"</row>", cells=cells, dirty=True))
        keep_before = [r for r in self.rows if r.num < first]
        after = [r for r in self.rows if r.num > last]
        if delta:
            after = self._shift_rows(after, delta)
            self._shift_refs_after(last, delta)
        self.rows = keep_before + built + after
        self._index = {r.num: i for i, r in enumerate(self.rows)}
        self.changed = True
        return delta

    def _shift_refs_after(self, last: int, delta: int) -> None:
        def fix(m):
            def one(a):
                n = int(a.group(2))
                return a.group(1) + (str(n + delta).encode() if n > last else a.group(2))
            return m.group(1) + b'="' + _A1_RE.sub(one, m.group(2)) + b'"'
        self.tail = _REFS_AFTER_RE.sub(fix, self.tail)

    # ---------------------------------------------------------------- output

    def _row_xml(self, row: _Row) -> bytes:
        if not row.dirty:
            return row.xml
        return _open_tag(row.xml) + b"".join(cx for _, cx in self._cells(row)) + b"</row>"

    def to_bytes(self) -> bytes:
        head = self.head
        if self.rows:
            max_row = max(r.num for r in self.rows)
            max_col = 0
            for r in self.rows:
                if r.cells:
                    max_col = max(max_col, max(c for c, _ in r.cells))

            def dim(m):
                ref = m.group(2)
                parts = ref.split(b":")
                end = parts[-1]
                em = _A1_RE.fullmatch(end)
                if not em:
                    return m.group(0)
                letters = em.group(1)
                if col_index(letters) < max_col:
                    letters = col_letter(max_col).encode()
                start = parts[0] if len(parts) > 1 else b"A1"
                return m.group(1) + start + b":" + letters + str(max_row).encode() + m.group(3)
            head = _DIM_RE.sub(dim, head, count=1)
        return head + b"".join(self._row_xml(r) for r in self.rows) + self.tail


# --------------------------------------------------------------------------- workbook level


def sheet_parts(zf: zipfile.ZipFile, path: str = "") -> dict[str, str]:
    """Sheet name -> zip member of its worksheet XML."""
    try:
        wb = zf.read("xl/workbook.xml")
        rels = zf.read("xl/_rels/workbook.xml.rels")
    except KeyError as exc:
        raise ReportFormatError(f"not an xlsx workbook ({exc.args[0]})", path=path or None) from None
    targets = {}
    for m in _REL_RE.finditer(rels):
        a = dict(_ATTR_RE.findall(m.group(0)))
        if b"Id" in a and b"Target" in a:
            targets[a[b"Id"].decode()] = a[b"Target"].decode()
    out = {}
    from xml.sax.saxutils import unescape

    for m in _SHEET_RE.finditer(wb):
        a = dict(_ATTR_RE.findall(m.group(0)))
        name = unescape(a.get(b"name", b"").decode(), {"&quot;": '"', "&apos;": "'"})
        rid = (a.get(b"r:id") or next((v for k, v in a.items() if k.endswith(b":id")), b"")).decode()
        t = targets.get(rid)
        if not t:
            continue
        member = t.lstrip("/") if t.startswith("/") else posixpath.normpath(posixpath.join("xl", t))
        out[name] = member
    return out


@dataclass
class WorkbookPatch:
    """Edits to apply: sheet name -> callable(SheetXml) performing them."""

    edits: dict[str, list] = field(default_factory=dict)

    def add(self, sheet: str, fn) -> None:
        self.edits.setdefault(sheet, []).append(fn)


def _damaged(src: str, member: str, exc: BaseException) -> ReportFormatError:
    text = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
    return ReportFormatError(f"zip member {member!r} is damaged ({text}); the workbook was not changed: restore "
                             f"or regenerate it", path=src)


def _read_member(zin: zipfile.ZipFile, info: zipfile.ZipInfo, src: str) -> bytes:
    try:
        return zin.read(info)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError) as exc:
        raise _damaged(src, info.filename, exc) from None


def patch_workbook(src: str, dst: str, patch: WorkbookPatch, *, force: bool = False) -> None:
    """Write ``src`` with ``patch`` applied to ``dst`` atomically (``mcp_server.core.atomic``: temp file in
    dst's directory, fsync, os.replace; a symlinked ``dst`` writes its target).

    ``dst`` may equal ``src``; on any failure (a damaged zip member included) the file at ``dst``
    is untouched. A read-only ``dst`` is refused unless ``force``.
    """
    try:
        zin = zipfile.ZipFile(src)
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as exc:
        raise ReportFormatError(f"not a readable xlsx (zip) file ({exc})", path=src) from None
    with zin:
        try:
            parts = sheet_parts(zin, src)
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError) as exc:
            raise _damaged(src, "xl/workbook.xml", exc) from None
        members = {parts[s]: s for s in patch.edits if s in parts}
        missing = [s for s in patch.edits if s not in parts]
        if missing:
            raise ReportFormatError(f"sheet(s) {missing} not found in the workbook parts", path=src)
        with atomic_target(dst, what="workbook", force=force) as tmp:
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zout:
                for info in zin.infolist():
                    data = _read_member(zin, info, src)
                    sheet = members.get(info.filename)
                    if sheet is not None:
                        try:
                            sx = SheetXml(data, sheet)
                            for fn in patch.edits[sheet]:
                                fn(sx)
                        except ReportFormatError as exc:  # name the workbook, not only the sheet
                            raise ReportFormatError(str(exc), path=src) from None
                        data = sx.to_bytes()
                    zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                    zi.compress_type = info.compress_type
                    zi.external_attr = info.external_attr
                    zout.writestr(zi, data, compresslevel=1 if info.compress_type == zipfile.ZIP_DEFLATED else None)
