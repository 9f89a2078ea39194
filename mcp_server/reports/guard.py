"""Checks an xlsx file must pass before any xlsx reader (calamine, openpyxl) sees it.

An agent hands kernelscope workbooks it did not make. calamine sizes a sheet's grid from the furthest
cell reference (one cell at ``XFD1048576`` makes it allocate 512 GB and abort the process), copies a
shared string into every cell that uses it (one 8 MB string used by 800 cells is 6.5 GB), and trusts the
zip. So before a reader opens the file, ``check_xlsx`` streams every zip member once (1 MiB at a time,
memory bounded by the chunk) and checks, each bound from ``mcp_server.core.limits``:

* member count, each member's decompressed size, the total, and each member's compression ratio
  (decompressed / compressed; checked once a member passes 16 MiB) — on the bytes that really come
  out, not the sizes the zip declares;
* every member's CRC-32 and deflate stream (a damaged member is a typed error naming it);
* per worksheet, the bounding box of its ``<dimension ref>``, row and cell references:
  rows x columns <= ``KERNELSCOPE_MAX_XLSX_CELLS``, and its empty cells (grid minus the cells the XML
  holds; calamine allocates them all, about 75 bytes each) <= the larger of
  ``KERNELSCOPE_MAX_XLSX_EMPTY_CELLS`` and the cells present (real sheets are dense);
* the shared strings: each one <= ``KERNELSCOPE_MAX_XLSX_STRING_BYTES`` (XML bytes, an upper bound of
  its characters), and the text the cells expand to (sum over string cells of their string's length)
  <= ``KERNELSCOPE_MAX_XLSX_TEXT_BYTES``; the sum is first bounded by (string cells x longest string)
  and counted exactly only when that bound is over the limit.

Every failure is a ``ReportFormatError`` (damaged file) or a ``LimitError`` (over a bound) naming the
file, the member or sheet, and for limits the variable that raises it. A file that passed is remembered
by (path, mtime, size), so reading it again costs nothing.
"""
from __future__ import annotations

import os
import re
import struct
import zipfile
import zlib
from functools import lru_cache
from pathlib import Path

from mcp_server.core.envvars import env
from mcp_server.core.errors import LimitError, ReportFormatError
from mcp_server.core.limits import env_name, human, limit, over
from mcp_server.reports.xlsx_patch import col_index, sheet_parts

CHUNK = 1 << 20
RATIO_AFTER = 16 << 20  # the compression-ratio guard starts once a member has given this much

_SHEET = re.compile(r"^xl/worksheets/[^/]+\.xml$", re.IGNORECASE)
_SST = "xl/sharedstrings.xml"
_DIM = re.compile(rb'<(?:\w+:)?dimension\b[^>]*?\bref="([^"]*)"')
_CELL_REF = re.compile(rb'<(?:\w+:)?c\b[^>]*?\br="([A-Za-z]+)(\d+)"')
_ROW_REF = re.compile(rb'<(?:\w+:)?row\b[^>]*?\br="(\d+)"')
_REF = re.compile(rb"\$?([A-Za-z]+)\$?(\d+)")
_S_CELL = re.compile(rb'<(?:\w+:)?c\b[^>]*?\bt="s"[^>]*>\s*<(?:\w+:)?v>\s*(\d+)\s*<')
_SI = re.compile(rb"<(?:\w+:)?si[\s>]")
# a cell value or string that reads as a non-finite (or absurdly large) number: inf, infinity, 1e999,
# 1.5E+300, 400 digits (calamine and pandas turn them into inf; sums and --json break)
_NONFINITE = re.compile(rb"<(?:\w+:)?[vt](?:\s[^>]*)?>\s*([-+]?(?:inf(?:inity)?|(?:\d+\.?\d*|\.\d+)e\+?\d{3,}"
                        rb"|\d{300,}(?:\.\d*)?))\s*<", re.IGNORECASE)
_LAST_REF = re.compile(rb'\br="([A-Za-z]+\d+)"')
_EXP = re.compile(rb"\d[eE]\+?\d{3}")
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 300
_CELL_FAST = re.compile(rb'<c r="([A-Z]+)(\d+)"')
_ROW_FAST = re.compile(rb'<row r="(\d+)"')


def _maybe_nonfinite(text: bytes) -> bool:
    """Cheap pre-test for ``_NONFINITE`` (C-speed scans; the regex runs only on chunks that pass)."""
    z = text.translate(_DIGITS_TO_ZERO)
    return (b"inf" in text.lower() or _LONG_DIGITS in z
            or ((b"0e" in z or b"0E" in z) and _EXP.search(text) is not None))


def _col_letters(n: int) -> str:
    out = ""
    while n > 0 and len(out) < 12:
        n, r = divmod(n - 1, 26)
        out = chr(65 + r) + out
    return out or "A"


class _SheetScan:
    """Bounding box and string-cell count of one worksheet's XML, fed chunk by chunk."""

    def __init__(self) -> None:
        self.max_row = 0
        self.max_col = 0
        self.s_cells = 0
        self.present = 0  # cell elements in the XML (the cells the grid really holds)
        self.dim_done = False
        self.bad_number: tuple[str, str] | None = None  # (cell, text) of the first non-finite number

    @property
    def max_ref(self) -> str:
        return f"{_col_letters(self.max_col)}{self.max_row}"

    def feed(self, text: bytes) -> None:
        if not self.dim_done:  # <dimension> comes before <sheetData>: looked for in the first text only
            self.dim_done = True
            m = _DIM.search(text, 0, text.find(b"<sheetData") if b"<sheetData" in text else len(text))
            if m:
                for cm in _REF.finditer(m.group(1)):
                    self.max_col = max(self.max_col, col_index(cm.group(1).upper()) + 1)
                    self.max_row = max(self.max_row, int(cm.group(2)))
        # the usual writers put r first (<c r="A1" ...>): a fast pattern, the general one when any cell/row differs
        fast = text.count(b"<c ") == text.count(b'<c r="') and b":c " not in text
        rows = set((_ROW_FAST if fast and text.count(b"<row ") == text.count(b'<row r="') else _ROW_REF).findall(text))
        if rows:
            self.max_row = max(self.max_row, max(map(int, rows)))
        refs = (_CELL_FAST if fast else _CELL_REF).findall(text)
        if refs:
            self.max_col = max(self.max_col, max(col_index(x.upper()) for x in {c for c, _ in refs}) + 1)
            self.max_row = max(self.max_row, max(map(int, {r for _, r in refs})))
        self.s_cells += text.count(b't="s"')
        self.present += text.count(b"<c ") + text.count(b"<c>") + (text.count(b":c ") if not fast else 0)
        if self.bad_number is None and _maybe_nonfinite(text):
            m = _NONFINITE.search(text)
            if m:
                refs = _LAST_REF.findall(text, max(0, m.start() - 400), m.start())
                self.bad_number = ((refs[-1].decode("ascii", "replace") if refs else "?"),
                                   m.group(1)[:40].decode("ascii", "replace"))


class _StringsScan:
    """Byte length of every shared string (``<si>`` element, markup included: an upper bound)."""

    def __init__(self) -> None:
        self.lens: list[int] = []
        self.pending = 0  # bytes of the string the last chunk ended inside
        self.started = False
        self.bad_number: tuple[int, str] | None = None  # (index, text) of a string that reads as inf

    def feed(self, text: bytes) -> None:
        if self.bad_number is None and _maybe_nonfinite(text):
            m = _NONFINITE.search(text)
            if m:
                self.bad_number = (len(self.lens) + len(_SI.findall(text, 0, m.start())) - (0 if self.started else 1),
                                   m.group(1)[:40].decode("ascii", "replace"))
        starts = [m.start() for m in _SI.finditer(text)]
        if not starts:
            if self.started:
                self.pending += len(text)
            return
        if self.started:
            self.lens.append(self.pending + starts[0])
        self.lens.extend(b - a for a, b in zip(starts, starts[1:]))
        self.pending = len(text) - starts[-1]
        self.started = True

    def finish(self) -> None:
        if self.started:
            self.lens.append(self.pending)
            self.started = False


def _cut(carry: bytes, data: bytes) -> tuple[bytes, bytes]:
    """(text to scan now, carry) cut before the last '<' so no tag spans two scans."""
    text = carry + data
    q = text.rfind(b"<")
    if q <= 0 or len(text) - q > CHUNK:
        return text, b""
    return text[:q], text[q:]


def _stream(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: str, budget: list[int], feed=None) -> None:
    """Decompress one member in chunks, applying the size/ratio bounds; ``feed(text)`` sees its text."""
    max_member, max_ratio = limit("XLSX_MEMBER_BYTES"), limit("XLSX_RATIO")
    out = 0
    carry = b""
    try:
        with zf.open(info) as f:
            while True:
                data = f.read(CHUNK)
                if not data:
                    break
                out += len(data)
                budget[0] -= len(data)
                if out > max_member:
                    raise over("XLSX_MEMBER_BYTES", f"zip member '{info.filename}' (decompressed)", path=path,
                               unit="bytes")
                if budget[0] < 0:
                    raise over("XLSX_TOTAL_BYTES", "the workbook's decompressed members together", path=path,
                               unit="bytes")
                if out > RATIO_AFTER and out > max_ratio * max(info.compress_size, 1):
                    raise over("XLSX_RATIO", f"zip member '{info.filename}' compression ratio",
                               f"over {out // max(info.compress_size, 1)}:1", path=path)
                if feed is not None:
                    text, carry = _cut(carry, data)
                    feed(text)
            if feed is not None and carry:
                feed(carry)
    except zipfile.BadZipFile as exc:  # CRC mismatch, bad local header
        raise ReportFormatError(f"damaged zip member '{info.filename}' ({exc})", path=path,
                                hint="the file is damaged; write or copy it again") from None
    except (zlib.error, EOFError) as exc:
        raise ReportFormatError(f"damaged zip member '{info.filename}' (corrupt deflate data: {exc})", path=path,
                                hint="the file is damaged; write or copy it again") from None
    except (NotImplementedError, RuntimeError) as exc:  # unsupported compression, encryption
        raise ReportFormatError(f"zip member '{info.filename}' cannot be read ({exc})", path=path) from None
    except (OSError, ValueError, OverflowError, struct.error) as exc:  # offsets past the file, odd headers
        raise ReportFormatError(f"damaged zip member '{info.filename}' ({type(exc).__name__}: {exc})", path=path,
                                hint="the file is damaged; write or copy it again") from None


def _empty_floor() -> int:
    """The empty-cells bound: ``KERNELSCOPE_MAX_XLSX_EMPTY_CELLS``; when only ``KERNELSCOPE_MAX_XLSX_CELLS`` is
    set, that one value raises both (one knob: "allow grids this large")."""
    if (env(env_name("XLSX_CELLS")) or "").strip() and not env(env_name("XLSX_EMPTY_CELLS")):
        return max(limit("XLSX_CELLS"), limit("XLSX_EMPTY_CELLS"))
    return limit("XLSX_EMPTY_CELLS")


def _sheet_label(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: str) -> str:
    """How a message names the worksheet ``info``: by its sheet name, else (the workbook part odd or large) by the
    zip member."""
    name = None
    try:
        if zf.getinfo("xl/workbook.xml").file_size <= (16 << 20):
            name = {m: n for n, m in sheet_parts(zf, path).items()}.get(info.filename)
    except Exception:  # only for naming things in a message; the member name serves as well
        pass
    return f"sheet '{name}'" if name else f"worksheet '{info.filename}'"


def _exact_text(zf: zipfile.ZipFile, info: zipfile.ZipInfo, lens: list[int], path: str) -> int:
    """Sum over the sheet's string cells of their shared string's byte length."""
    total = [0]
    n = len(lens)

    def feed(text: bytes) -> None:
        for i in _S_CELL.findall(text):
            k = int(i)
            if k < n:
                total[0] += lens[k]

    _stream(zf, info, path, [1 << 62], feed)
    return total[0]


def check_xlsx(path: str | os.PathLike) -> None:
    """Raise a typed error when ``path`` is not a sound xlsx zip within the bounds (see the module text)."""
    p = Path(path)
    st = p.stat()
    _check_cached(str(p), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=64)
def _check_cached(path: str, mtime_ns: int, size: int) -> None:
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise ReportFormatError(f"not a readable xlsx workbook (not a zip archive: {exc})", path=path) from None
    except OSError as exc:
        raise ReportFormatError(f"cannot open the workbook ({exc.strerror or exc})", path=path) from None
    except (ValueError, OverflowError, struct.error, EOFError, NotImplementedError) as exc:  # odd directory
        raise ReportFormatError(f"not a readable xlsx workbook (damaged zip directory: {type(exc).__name__}: "
                                f"{exc})", path=path) from None
    with zf:
        infos = zf.infolist()
        if len(infos) > limit("XLSX_MEMBERS"):
            raise over("XLSX_MEMBERS", "the number of zip members", f"{len(infos):,}", path=path)
        budget = [limit("XLSX_TOTAL_BYTES")]
        lower = {i.filename.lower(): i for i in infos}
        lens: list[int] = []
        sst = lower.get(_SST)
        if sst is not None:
            ss = _StringsScan()
            _stream(zf, sst, path, budget, ss.feed)
            ss.finish()
            lens = ss.lens
            if ss.bad_number is not None:
                raise ReportFormatError(f"shared string {ss.bad_number[0]} (xl/sharedStrings.xml) is "
                                        f"{ss.bad_number[1]!r}, a number that is not finite once read "
                                        "(over 1e+100, inf)", path=path,
                                        hint="fix or remove that value; no measurement is that large")
            if lens:
                longest = max(lens)
                if longest > limit("XLSX_STRING_BYTES"):
                    raise over("XLSX_STRING_BYTES", f"shared string {lens.index(longest)} (xl/sharedStrings.xml)",
                               human(longest), path=path, unit="bytes")
        longest = max(lens) if lens else 0
        max_cells, max_text = limit("XLSX_CELLS"), limit("XLSX_TEXT_BYTES")
        text_total = 0
        for info in infos:
            if info is sst or info.is_dir():
                continue
            if not _SHEET.match(info.filename):
                _stream(zf, info, path, budget)
                continue
            scan = _SheetScan()
            _stream(zf, info, path, budget, scan.feed)
            if scan.bad_number is not None:
                where = _sheet_label(zf, info, path)
                raise ReportFormatError(f"{where}, cell {scan.bad_number[0]}: {scan.bad_number[1]!r} is a number "
                                        "that is not finite once read (over 1e+100, inf)", path=path,
                                        hint="fix or remove that value; no measurement is that large")
            cells = scan.max_row * max(scan.max_col, 1) if scan.max_row else 0
            if cells > max_cells:
                where = _sheet_label(zf, info, path)
                raise over("XLSX_CELLS", f"{where}: the cell grid up to {scan.max_ref}",
                           f"{scan.max_row:,} rows x {max(scan.max_col, 1):,} columns = {cells:,} cells", path=path)
            empty = cells - scan.present
            if empty > max(_empty_floor(), scan.present):
                where = _sheet_label(zf, info, path)
                floor = _empty_floor()
                raise LimitError(f"{where}: the cell grid up to {scan.max_ref} has {cells:,} cells but only "
                                 f"{scan.present:,} hold a value; its {empty:,} empty cells (the reader allocates "
                                 f"each) exceed the limit of max({floor:,}, cells present)", path=path,
                                 hint=f"if the input is genuine, raise it with {env_name('XLSX_EMPTY_CELLS')}"
                                      "=<larger value>")
            bound = scan.s_cells * longest
            if bound and text_total + bound > max_text:
                bound = _exact_text(zf, info, lens, path)
            text_total += bound
            if text_total > max_text:
                where = _sheet_label(zf, info, path)
                raise over("XLSX_TEXT_BYTES", f"the shared-string text the cells expand to (up to {where})",
                           human(text_total), path=path, unit="bytes")


def clear_cache() -> None:
    _check_cached.cache_clear()
