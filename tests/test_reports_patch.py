"""The zip-level xlsx patcher on an Excel-style part (shared strings, spans, merged cells)."""
from __future__ import annotations

import zipfile

import pytest
from python_calamine import CalamineWorkbook

from mcp_server.core.errors import ReportFormatError
from mcp_server.reports.xlsx_patch import SheetXml, WorkbookPatch, col_index, col_letter, patch_workbook

CT = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
      '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
      '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
      '<Default Extension="xml" ContentType="application/xml"/>'
      '<Override PartName="/xl/workbook.xml" '
      'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
      '<Override PartName="/xl/worksheets/sheet1.xml" '
      'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
      '<Override PartName="/xl/sharedStrings.xml" '
      'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
      '</Types>')
RELS = ('<?xml version="1.0" encoding="UTF-8"?><Relationships '
        'xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        'officeDocument" Target="xl/workbook.xml"/></Relationships>')
WB = ('<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/'
      'main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets>'
      '<sheet name="Grok &amp; Co (dec)" sheetId="1" r:id="rId7"/></sheets></workbook>')
WB_RELS = ('<?xml version="1.0" encoding="UTF-8"?><Relationships '
           'xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
           '<Relationship Id="rId7" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
           'worksheet" Target="/xl/worksheets/sheet1.xml"/>'
           '<Relationship Id="rId8" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
           'sharedStrings" Target="sharedStrings.xml"/></Relationships>')
SST = ('<?xml version="1.0" encoding="UTF-8"?><sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
       'count="6" uniqueCount="6"><si><t>Category</t></si><si><t>gemm</t></si><si><t>Total</t></si>'
       '<si><t>Kernel Name</t></si><si><t>nvjet_a</t></si><si><t>tail note</t></si></sst>')
SHEET = ('<?xml version="1.0" encoding="UTF-8"?><worksheet '
         'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><dimension ref="A1:C7"/><sheetData>'
         '<row r="1" spans="1:3"><c r="A1" t="s" s="2"><v>0</v></c><c r="C1"><v>1</v></c></row>'
         '<row r="2" spans="1:3"><c r="A2" t="s" s="5"><v>1</v></c><c r="C2" s="6"><v>10.5</v></c></row>'
         '<row r="3" spans="1:3"><c r="A3" t="s" s="7"><v>2</v></c><c r="C3"><v>10.5</v></c></row>'
         '<row r="4" spans="1:3" ht="20" customHeight="1"/>'
         '<row r="5" spans="1:3"><c r="A5" t="s"><v>3</v></c></row>'
         '<row r="6" spans="1:3"><c r="A6" t="s"><v>4</v></c><c r="B6" t="s" s="9"><v>1</v></c></row>'
         '<row r="7" spans="1:3"><c r="A7" t="s"><v>5</v></c></row>'
         '</sheetData><mergeCells count="1"><mergeCell ref="A7:C7"/></mergeCells></worksheet>')


def _make(path):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", CT)
        z.writestr("_rels/.rels", RELS)
        z.writestr("xl/workbook.xml", WB)
        z.writestr("xl/_rels/workbook.xml.rels", WB_RELS)
        z.writestr("xl/sharedStrings.xml", SST)
        z.writestr("xl/worksheets/sheet1.xml", SHEET)


def test_column_letters():
    for i in (0, 25, 26, 701, 702, 16383):
        assert col_index(col_letter(i).encode()) == i
    assert col_letter(0) == "A" and col_letter(26) == "AA"


def test_patch_shared_string_sheet(tmp_path):
    src = tmp_path / "x.xlsx"
    _make(src)
    name = "Grok & Co (dec)"
    assert CalamineWorkbook.from_path(str(src)).get_sheet_by_name(name).to_python()[5] == ["nvjet_a", "gemm", ""]
    patch = WorkbookPatch()
    patch.add(name, lambda sx: sx.set_cell(6, 1, "pointwise <fast> & co"))
    patch.add(name, lambda sx: sx.replace_rows(2, 2, [["gemm", None, 4.5], ["pointwise", None, 6.0],
                                                      ["other", None, 0.25]]))
    out = tmp_path / "y.xlsx"
    patch_workbook(str(src), str(out), patch)
    rows = CalamineWorkbook.from_path(str(out)).get_sheet_by_name(name).to_python(skip_empty_area=False)
    assert rows[0][0] == "Category"
    assert [r[0] for r in rows[1:4]] == ["gemm", "pointwise", "other"]
    assert [r[2] for r in rows[1:4]] == [4.5, 6.0, 0.25]
    assert rows[4][0] == "Total" and rows[4][2] == 10.5      # shifted down by 2
    assert rows[6][0] == "Kernel Name"
    assert rows[7][:2] == ["nvjet_a", "pointwise <fast> & co"]  # edited, then shifted
    assert rows[8][0] == "tail note"
    xml = zipfile.ZipFile(out).read("xl/worksheets/sheet1.xml")
    assert b'<mergeCell ref="A9:C9"/>' in xml and b'<dimension ref="A1:C9"/>' in xml
    assert b'<row r="6" spans="1:3" ht="20" customHeight="1"/>' in xml  # untouched row kept, renumbered
    assert b'<c r="A3" t="inlineStr" s="5"' in xml or b'<c r="A3" s="5" t="inlineStr"' in xml  # style kept
    assert b'<c r="B8" s="9" t="inlineStr">' in xml
    assert b"pointwise &lt;fast&gt; &amp; co" in xml
    # untouched parts are byte-identical
    zin, zout = zipfile.ZipFile(src), zipfile.ZipFile(out)
    for n in zin.namelist():
        if n != "xl/worksheets/sheet1.xml":
            assert zin.read(n) == zout.read(n)


def test_shrinking_block_and_missing_cells():
    sx = SheetXml(SHEET.encode(), "s")
    sx.replace_rows(2, 3, [["gemm", "100%", 21.0]])  # two rows become one
    sx.set_cell(4, 1, 7)  # row 5 moved to 4; B4 did not exist
    out = sx.to_bytes()
    assert b'<row r="4"' in out and b'<c r="B4"><v>7</v></c>' in out
    assert b'<mergeCell ref="A6:C6"/>' in out
    with pytest.raises(ReportFormatError, match="sheet 'bad': worksheet XML has no sheetData"):
        SheetXml(b"<worksheet><foo/></worksheet>", "bad")


def _corrupt(path, member: str, how: str) -> None:
    """Damage one member's data in place: 'crc' flips a byte of a stored member (Bad CRC-32),
    'deflate' garbles a deflated member's stream (zlib.error)."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(member)
    raw = bytearray(open(path, "rb").read())
    name_len, extra_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little"), \
        int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    if how == "crc":
        raw[start + 5] ^= 0x01
    else:
        raw[start:start + 8] = b"\xff" * 8
    open(path, "wb").write(bytes(raw))


@pytest.mark.parametrize("how, member", [("crc", "docProps/app.xml"), ("deflate", "xl/sharedStrings.xml"),
                                         ("deflate", "xl/worksheets/sheet1.xml")])
def test_damaged_member_is_a_typed_error_and_nothing_changes(tmp_path, how, member):
    src = tmp_path / "book.xlsx"
    _make(src)
    with zipfile.ZipFile(src, "a", zipfile.ZIP_STORED) as z:
        z.writestr("docProps/app.xml", "<Properties>" + "x" * 200 + "</Properties>")
    _corrupt(src, member, how)
    before = src.read_bytes()
    patch = WorkbookPatch()
    patch.add("Grok & Co (dec)", lambda sx: None)
    for dst in (src, tmp_path / "out.xlsx"):
        with pytest.raises(ReportFormatError, match="damaged") as ei:
            patch_workbook(str(src), str(dst), patch)
        msg = str(ei.value)
        assert member in msg and str(src) in msg and "\n" not in msg
        assert src.read_bytes() == before
        assert sorted(x.name for x in tmp_path.iterdir()) == ["book.xlsx"]
