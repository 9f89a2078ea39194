#!/usr/bin/env python3
"""Write the small hostile inputs that the isolation and bad-input tests replay.

Each file is a reproducer of one way a file an agent did not make can attack a reader (issue 14);
tests/fixtures/README.md ("hostile") says what each one does and what kernelscope answers:

* ``xlsx_max_cell.xlsx``: a report whose 'GPU Kernels' sheet has one cell at XFD1048576, the last
  cell Excel allows; the calamine reader sizes its grid from it and aborts the process (SIGABRT).
* ``xlsx_dimension.xlsx``: the same grid claimed only by the sheet's ``<dimension ref="A1:XFD1048576">``.
* ``xlsx_sparse_grid.xlsx``: cells at A1 and T1000000 only: a 20-million-cell grid (1.5 GB in calamine).
* ``xlsx_long_string.xlsx``: one 8 MiB shared string used by 800 cells (6.5 GB once expanded).
* ``xlsx_string_fanout.xlsx``: one 512 KiB shared string (under the per-string bound) used by 8 000 cells.
* ``xlsx_bad_crc.xlsx``: a report whose Summary sheet is stored with one byte changed (Bad CRC-32).
* ``xlsx_bad_deflate.xlsx``: a report whose Summary sheet's deflate stream is damaged (zlib.error).
* ``xlsx_zip_ratio.xlsx``: a sheet member of 64 MiB of blanks (ratio about 1000:1).
* ``xlsx_sheet_paren.xlsx``: a kernelscope report with an extra sheet named ``Kernels (full``.
* ``xlsx_inf_number.xlsx``: a kernelscope report whose 'Kernels (full)' durations/counts hold ``1e999``.
* ``xlsx_sheetdata_junk.xlsx``: a kernelscope report whose Summary sheetData holds an element before
  its first row (readers skip it; the recategorize patcher refuses the sheet).
* ``trace_deep.json.gz``: a Kineto trace whose one event's args nest 100 000 lists deep.
* ``trace_deep_meta.json.gz``: metadata before 'traceEvents' nesting 100 000 deep.
* ``trace_nonfinite.json``: kernel durations 1e308 (twice: the sum overflows), 1e999, -5 and one sane 7 us.
* ``trace_zeros.json.gz``: 128 MiB of zero bytes in 128 gzip members (128 KiB file; the 4 MB / 4 GiB
  variant of the issue is the same recipe with 4096 members: ``gzip_zeros(path, 4096)``).
* ``categories_long_field.csv``: a categories CSV whose line 3 has a 140 000-character pattern field.

The loop, ledger and validate reproducers of issue 21 (execution and confinement) hold absolute paths, so
the tests build them in a temporary folder with the functions of the section "loop, ledger, validate"
below (``loop_escape``, ``fsmonitor_repo``, ``ledger_inputs``, ``validate_escapes``, ``deep_documents``).

The base reports are written by kernelscope itself from the committed trace fixture
``tests/fixtures/traces/llama_prefill_sdpa.json.gz`` (no GPU needed).

    python3 tools/make_hostile_inputs.py --out tests/fixtures/hostile
"""
from __future__ import annotations

import argparse
import gzip
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE_TRACE = ROOT / "tests" / "fixtures" / "traces" / "llama_prefill_sdpa.json.gz"


def xlsx_max_cell(path: Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "GPU Kernels"
    ws.append(["Kernel Name", "Category", "Total Duration (us)", "Count", "Avg (us)", "% of Total", "Module Types"])
    ws["XFD1048576"] = "x"
    wb.create_sheet("Summary").append(["Metric", "Value (us)", "Percentage", "Detail Tab"])
    wb.save(path)


_CT = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
       '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
       '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
       '<Default Extension="xml" ContentType="application/xml"/>'
       '<Override PartName="/xl/workbook.xml" '
       'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
       '<Override PartName="/xl/worksheets/sheet1.xml" '
       'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
       '{sst}</Types>')
_SST_CT = ('<Override PartName="/xl/sharedStrings.xml" '
           'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>')
_RELS = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
         '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
         '<Relationship Id="rId1" '
         'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
         'Target="xl/workbook.xml"/></Relationships>')
_WB = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
       '<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
       'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
       '<sheets><sheet name="{name}" sheetId="1" r:id="rId1"/></sheets></workbook>')
_WB_RELS = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            '<Relationship Id="rId1" '
            'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" '
            'Target="worksheets/sheet1.xml"/>{sst}</Relationships>')
_WB_RELS_SST = ('<Relationship Id="rId2" '
                'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings" '
                'Target="sharedStrings.xml"/>')
_SHEET_HEAD = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
               '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">')


def _minimal_xlsx(path: Path, sheet_xml, shared: list[str] | None = None, name: str = "GPU Kernels") -> None:
    """A one-sheet workbook written part by part (``sheet_xml``: bytes, or a writer callable)."""
    sst = shared is not None
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("[Content_Types].xml", _CT.format(sst=_SST_CT if sst else ""))
        z.writestr("_rels/.rels", _RELS)
        z.writestr("xl/workbook.xml", _WB.format(name=name))
        z.writestr("xl/_rels/workbook.xml.rels", _WB_RELS.format(sst=_WB_RELS_SST if sst else ""))
        if callable(sheet_xml):
            with z.open("xl/worksheets/sheet1.xml", "w", force_zip64=True) as f:
                sheet_xml(f)
        else:
            z.writestr("xl/worksheets/sheet1.xml", sheet_xml)
        if sst:
            body = "".join(f"<si><t>{s}</t></si>" for s in shared)
            z.writestr("xl/sharedStrings.xml",
                       '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
                       '<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
                       f'count="{len(shared)}" uniqueCount="{len(shared)}">{body}</sst>')


def xlsx_dimension(path: Path) -> None:
    _minimal_xlsx(path, _SHEET_HEAD + '<dimension ref="A1:XFD1048576"/><sheetData>'
                  '<row r="1"><c r="A1" t="inlineStr"><is><t>Kernel Name</t></is></c></row>'
                  '</sheetData></worksheet>')


def xlsx_sparse_grid(path: Path) -> None:
    _minimal_xlsx(path, _SHEET_HEAD + '<sheetData>'
                  '<row r="1"><c r="A1" t="inlineStr"><is><t>Kernel Name</t></is></c></row>'
                  '<row r="1000000"><c r="T1000000"><v>1</v></c></row></sheetData></worksheet>')


def _string_cells(n: int) -> str:
    rows = "".join(f'<row r="{i}"><c r="A{i}" t="s"><v>0</v></c></row>' for i in range(1, n + 1))
    return _SHEET_HEAD + f'<dimension ref="A1:A{n}"/><sheetData>{rows}</sheetData></worksheet>'


def xlsx_long_string(path: Path) -> None:
    _minimal_xlsx(path, _string_cells(800), shared=["A" * (8 << 20)])


def xlsx_string_fanout(path: Path) -> None:
    _minimal_xlsx(path, _string_cells(8000), shared=["B" * (512 << 10)])


def xlsx_zip_ratio(path: Path) -> None:
    def write(f) -> None:
        f.write((_SHEET_HEAD + '<sheetData><row r="1"><c r="A1"><v>1</v></c></row></sheetData>').encode())
        blank = b" " * (1 << 20)
        for _ in range(64):
            f.write(blank)
        f.write(b"</worksheet>")

    _minimal_xlsx(path, write)


def _base_report(tmp: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from mcp_server.traces import analyze_trace

    out = tmp / "base.xlsx"
    analyze_trace(str(BASE_TRACE), output_xlsx=str(out))
    return out


def _rewrite(src: Path, dst: Path, edit) -> None:
    """Copy the zip ``src`` to ``dst`` with ``edit(name, data) -> (data, compress_type)`` applied."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data, ct = edit(info.filename, zin.read(info))
            zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            zi.compress_type = ct
            zout.writestr(zi, data)


def _summary_member(src: Path) -> str:
    from mcp_server.reports.xlsx_patch import sheet_parts

    with zipfile.ZipFile(src) as z:
        return sheet_parts(z)["Summary"]


def xlsx_bad_crc(path: Path, base: Path) -> None:
    member = _summary_member(base)
    _rewrite(base, path, lambda n, d: (d, zipfile.ZIP_STORED if n == member else zipfile.ZIP_DEFLATED))
    blob = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(member)
    # the stored data starts after the 30-byte local header, the name and the extra field
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    i = blob.index(b"<sheetData>", start) + 20
    blob[i] = ord("Q") if blob[i] != ord("Q") else ord("R")
    path.write_bytes(bytes(blob))


def xlsx_bad_deflate(path: Path, base: Path) -> None:
    member = _summary_member(base)
    shutil.copyfile(base, path)
    blob = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(member)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for k in range(start + info.compress_size // 3, start + info.compress_size // 3 + 48):
        blob[k] ^= 0xA5
    path.write_bytes(bytes(blob))


def xlsx_sheet_paren(path: Path, base: Path) -> None:
    import openpyxl

    wb = openpyxl.load_workbook(base)
    wb.create_sheet("Kernels (full").append(["Kernel Name", "Duration (us)"])
    wb.save(path)


def xlsx_inf_number(path: Path, base: Path) -> None:
    from mcp_server.reports.xlsx_patch import sheet_parts

    with zipfile.ZipFile(base) as z:
        member = sheet_parts(z)["Kernels (full)"]

    def edit(name: str, data: bytes):
        if name == member:
            # every numeric cell of rows 2-4 becomes 1e999 (an overflow to infinity when read)
            def sub(m: re.Match) -> bytes:
                row = int(m.group(2))
                return m.group(0) if not 2 <= row <= 4 else m.group(1) + b"<v>1e999</v>"
            data = re.sub(rb'(<c r="[A-Z]+(\d+)"(?: s="\d+")?>)<v>[^<]*</v>', sub, data)
        return data, zipfile.ZIP_DEFLATED

    _rewrite(base, path, edit)


def xlsx_sheetdata_junk(path: Path, base: Path) -> None:
    member = _summary_member(base)

    def edit(name: str, data: bytes):
        if name == member:
            data = data.replace(b"<sheetData>", b'<sheetData><x:note xmlns:x="urn:x"/>', 1)
        return data, zipfile.ZIP_DEFLATED

    _rewrite(base, path, edit)


def trace_deep(path: Path) -> None:
    d = 100_000
    doc = ('{"traceEvents":[{"cat":"kernel","name":"k","ts":1,"dur":1,"args":{"correlation":1,"x":'
           + "[" * d + "]" * d + "}}]}")
    path.write_bytes(gzip.compress(doc.encode(), 9, mtime=0))


def trace_deep_meta(path: Path) -> None:
    d = 100_000
    doc = '{"deviceProperties":' + "[" * d + "]" * d + ',"traceEvents":[]}'
    path.write_bytes(gzip.compress(doc.encode(), 9, mtime=0))


def trace_nonfinite(path: Path) -> None:
    ev = []
    for i, dur in enumerate(["1e308", "1e308", "1e999", "-5", "7"]):
        ev.append(f'{{"ph":"X","cat":"kernel","name":"k{i}","pid":0,"tid":7,"ts":{100 + i * 10},"dur":{dur},'
                  f'"args":{{"correlation":{i + 1},"device":0,"stream":7}}}}')
        ev.append(f'{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{99 + i * 10},'
                  f'"dur":1,"args":{{"correlation":{i + 1}}}}}')
    path.write_text('{"schemaVersion":1,"traceEvents":[\n' + ",\n".join(ev) + "\n]}\n")


def gzip_zeros(path: Path, members: int) -> None:
    """``members`` gzip members of 1 MiB of zero bytes each (readers treat them as one stream)."""
    one = gzip.compress(b"\0" * (1 << 20), 9, mtime=0)
    with open(path, "wb") as f:
        for _ in range(members):
            f.write(one)


def categories_long_field(path: Path) -> None:
    path.write_text("category,pattern\ngemm,gemm|matmul\nhuge," + "a" * 140_000 + "\nother,.*\n")


def big_buffer(path: Path, nbytes: int) -> None:
    """A probe buffer of ``nbytes``: header (132 blocks x 1 group) then begin/end records of event 1."""
    import numpy as np

    n = nbytes // 8
    buf = np.zeros(n, dtype="<u8")
    lanes = 132
    buf[0] = lanes | (1 << 32)
    body = buf[1:]
    rounds = body.size // lanes
    grid = body[: rounds * lanes].reshape(rounds, lanes)
    r = np.arange(rounds, dtype=np.uint64)[:, None]
    lane = np.arange(lanes, dtype=np.uint64)[None, :]
    kind = np.where(r % 2 == 0, 0, 1).astype(np.uint64)  # begin, end alternating
    tag = (lane << np.uint64(12)) | (np.uint64(1) << np.uint64(2)) | kind  # legacy layout, event 1
    grid[:] = tag | (((r * np.uint64(100) + np.uint64(1000)) & np.uint64(0xFFFFFFFF)) << np.uint64(32))
    buf.tofile(path)


# ----------------------------------------------------------------------------- disclosure and bounds (issue 21)
# Reproducers of what a caller-named file or an environment value could make kernelscope disclose, and of the
# sizes a trace set's head controls. tests/test_hostile_disclosure.py and tests/test_hostile_bounds.py replay them.

#: a marker that stands for a secret in the files below: no output, error or warning may ever carry it
SECRET_MARK = "KSHOSTILEsecret7f3a9c"

_ONE_KERNEL = ('"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":10,"dur":5,'
               '"args":{"correlation":1}}]')


def trace_world_size(path: Path) -> None:
    """A 214-byte trace whose distributedInfo claims world_size 10**12 (``analyze DIR`` sized a list by it: 8 GB)."""
    doc = '{"distributedInfo":{"backend":"nccl","rank":0,"world_size":1000000000000},' + _ONE_KERNEL + "}"
    assert len(doc) <= 213
    path.write_text(doc.ljust(213) + "\n")


def trace_rank_huge(path: Path) -> None:
    """A trace whose distributedInfo.rank is 10**400 (the rank report's file name was too long for the OS)."""
    path.write_text('{"distributedInfo":{"backend":"nccl","rank":1' + "0" * 400 + ',"world_size":2},'
                    + _ONE_KERNEL + "}\n")


def trace_dist_deep(path: Path) -> None:
    """A trace whose distributedInfo nests 100 000 lists deep (the set reader's decoder recursed: RecursionError)."""
    d = 100_000
    doc = '{"distributedInfo":' + "[" * d + "]" * d + "," + _ONE_KERNEL + "}\n"
    path.write_bytes(gzip.compress(doc.encode(), 9, mtime=0))


def trace_device_name(path: Path) -> None:
    """A trace whose deviceProperties[0].name is a number (a pydantic traceback on the CLI)."""
    path.write_text('{"deviceProperties":[{"id":0,"name":12345,"totalGlobalMem":1}],' + _ONE_KERNEL + "}\n")


def categories_passwd(path: Path) -> None:
    """A 'categories CSV' that is a passwd-like file whose lines carry the secret marker (its first line was
    echoed: ``found ['root:x:0:0:root:/root:/bin/bash']``)."""
    path.write_text(f"root:x:0:0:{SECRET_MARK}:/root:/bin/bash\n"
                    f"daemon:x:1:1:{SECRET_MARK}:/usr/sbin:/usr/sbin/nologin\n")


def blocks_bad_regex(path: Path) -> None:
    """A functional-blocks CSV whose line 4 holds an invalid regex carrying the secret marker (it was echoed)."""
    path.write_text("pattern,block,role\n# a comment\nrmsnorm,norm,norm\n"
                    f"{SECRET_MARK}(unclosed,attention,attention\nlm_head,head,gemm\n")


def blocks_short_row(path: Path) -> None:
    """A functional-blocks CSV whose line 3 has one field, the secret marker (the row was echoed)."""
    path.write_text(f"pattern,block,role\nrmsnorm,norm,norm\n{SECRET_MARK}\n")


def registry_env(path: Path, env: str) -> None:
    """A reference-source registry whose local-git row takes its checkout from the variable ``env``."""
    path.write_text("# registry\n\n| key | kind | repo | env | package | jql_project | enabled |\n"
                    "|---|---|---|---|---|---|---|\n"
                    f"| probe | local-git | ROCm/aiter | {env} | | | yes |\n")


def gpu_specs_token(path: Path) -> None:
    """A 'GPU spec table' that is a credentials TOML (its value was echoed: ``token = '...' is not a number``)."""
    path.write_text(f'[registry]\ntoken = "{SECRET_MARK}"\n')


def events_passwd(path: Path) -> None:
    """A timeline 'names file' that is a passwd-like file (its lines became event names in the answer)."""
    path.write_text(f"root:x:0:0:{SECRET_MARK}:/root:/bin/bash\n")


def spec_secret_value(path: Path) -> None:
    """A TOML file whose keys happen to be validate spec keys, with the secret marker as a value (it was echoed:
    ``'mode' must be one of ab, aa, got '...'``)."""
    path.write_text(f'mode = "{SECRET_MARK}"\n')


def spec_pow_flops(path: Path) -> None:
    """A validate spec (over the CPU fixtures in ../validate) whose flops expression is 9**9**9**9: the integer
    power ran for ever before the spec was accepted."""
    path.write_text('baseline = "../validate/base.py:matmul"\ncandidate = "../validate/cand_wrong.py:candidate"\n'
                    'inputs = "../validate/base.py:make_inputs"\nshapes = [{M = 1, K = 64, N = 128}]\n'
                    'dtype = "float32"\ndevice = "cpu"\nflops = "9**9**9**9"\n')


EXAMPLE_LEDGER = ROOT / "examples" / "mla_decode" / "h200" / "ledger.db"


def ledger_damaged(path: Path) -> None:
    """The example ledger with its pages after the first two overwritten (sqlite: "database disk image is
    malformed" at the first read, which escaped as a traceback). Built at test time (86 KB)."""
    blob = bytearray(EXAMPLE_LEDGER.read_bytes())
    page = int.from_bytes(blob[16:18], "big") or 65536
    for i in range(2 * page, len(blob), page):
        blob[i:i + 64] = b"\xff" * 64
    path.write_bytes(bytes(blob))


def ledger_env_text(path: Path) -> None:
    """The example ledger whose experiments' env column holds a JSON string, not an object (an AttributeError
    escaped ledger list). Built at test time."""
    import sqlite3

    shutil.copyfile(EXAMPLE_LEDGER, path)
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE experiments SET env = ?", (f'"{SECRET_MARK}"',))
    db.close()


def ledger_target_numbers(path: Path) -> None:
    """The example ledger whose experiments' target is an array of numbers (a pydantic ValidationError listing
    every item escaped ledger list). Found by bench/bench_fuzz.py. Built at test time."""
    import sqlite3

    shutil.copyfile(EXAMPLE_LEDGER, path)
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE experiments SET target = ?", ("[1, 2, 3]",))
    db.close()


def ledger_bad_text(path: Path) -> None:
    """The example ledger with a note that is not UTF-8 (a UnicodeDecodeError escaped ledger list). Found by
    bench/bench_fuzz.py. Built at test time."""
    import sqlite3

    shutil.copyfile(EXAMPLE_LEDGER, path)
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE experiments SET note = CAST(X'E2FF41' AS TEXT)")
    db.close()


def xlsx_nan_count(path: Path, base: Path = ROOT / "tests" / "fixtures" / "upstream" / "llama_prefill_sdpa.xlsx") -> None:
    """An upstream report (the committed upstream fixture) whose 'GPU Kernels' row 2 count is NaN (int(NaN): a
    ValueError escaped read_report and budget). Found by bench/bench_fuzz.py."""
    from mcp_server.reports.xlsx_patch import sheet_parts

    with zipfile.ZipFile(base) as z:
        member = sheet_parts(z)["GPU Kernels"]

    def edit(name: str, data: bytes):
        if name == member:
            data = re.sub(rb'(<c r="D2"(?: s="\d+")?(?: t="n")?>)<v>[^<]*</v>', rb"\1<v>NaN</v>", data, count=1)
        return data, zipfile.ZIP_DEFLATED

    _rewrite(base, path, edit)


def overhead_secret_value(path: Path) -> None:
    """A probe-overhead JSON whose sample is the secret marker (the float() error quoted it)."""
    path.write_text(f'{{"with_probes_us": ["{SECRET_MARK}"], "without_probes_us": [1.0]}}\n')


def disclosure_and_bounds(out: Path) -> None:
    trace_world_size(out / "trace_world_size.json")
    trace_rank_huge(out / "trace_rank_huge.json")
    trace_dist_deep(out / "trace_dist_deep.json.gz")
    trace_device_name(out / "trace_device_name.json")
    categories_passwd(out / "categories_passwd.csv")
    blocks_bad_regex(out / "blocks_bad_regex.csv")
    blocks_short_row(out / "blocks_short_row.csv")
    registry_env(out / "registry_env_secret.md", "AWS_SECRET_ACCESS_KEY")
    registry_env(out / "registry_env_plain.md", "KS_HOSTILE_CHECKOUT")
    gpu_specs_token(out / "gpu_specs_token.toml")
    events_passwd(out / "events_passwd.events")
    spec_secret_value(out / "spec_secret_value.toml")
    spec_pow_flops(out / "spec_pow_flops.toml")
    xlsx_nan_count(out / "xlsx_nan_count.xlsx")
    overhead_secret_value(out / "overhead_secret_value.json")


# ----------------------------------------------------------------------------- loop, ledger, validate (issue 21)

LOOP_BASE = "VERSION = 'base'\n"
VICTIM = "export PATH=/usr/bin  # the user's own file: no proposal may change it\n"


def _sh_git(cwd: Path, *args: str) -> None:
    import subprocess

    subprocess.run(["git", "-C", str(cwd), "-c", "user.email=k@s", "-c", "user.name=ks", *args], check=True,
                   capture_output=True)


def _patch(path: str, old: str, new: str) -> str:
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}+{new}")


#: (proposal id, what it tries): every one must end as an ``error`` with nothing written outside
LOOP_ESCAPES = {
    "absolute": "apply.file is an absolute path outside the project (the victim)",
    "dotdot": "apply.file goes up with '..' to the victim",
    "symlink": "apply.file is a symlink in the repository pointing at the victim",
    "gitdir": "apply.file lies inside the repository's .git",
    "repo-root": "a patch applied with repo = '/'",
    "patch-dotdot": "a patch whose paths go up with '..' to the victim",
    "patch-git": "a patch that writes .git/config",
    "stale-patch": "a patch that no longer applies (the tree moved on)",
    "not-a-patch": "a 'patch' that is the victim's text, no diff",
    "int8-spec": "an inline spec validate_candidate refuses (dtype = 'int8'), its swap applied then restored",
    "with-outside": "apply.with names a file outside the server's roots (refused over MCP; the CLI reads it, "
                    "then the spec is refused)",
}


def loop_escape(root: Path) -> dict[str, Path]:
    """A project whose proposals each try to write outside it (``LOOP_ESCAPES``). ``root/work`` is the
    server's root and the loop's working folder (target ``python proj/bench.py``, ``proj`` a git repository);
    ``root/outside/bashrc`` is the victim. Returns the paths a test needs."""
    work, outside = root / "work", root / "outside"
    proj = work / "proj"
    for d in (proj, work / "variants", work / "patches", outside):
        d.mkdir(parents=True, exist_ok=True)
    (proj / "kernel.py").write_text(LOOP_BASE)
    (proj / "bench.py").write_text("import kernel\n")
    _sh_git(proj, "init", "-q")
    _sh_git(proj, "add", ".")
    _sh_git(proj, "commit", "-q", "-m", "base")
    victim = outside / "bashrc"
    victim.write_text(VICTIM)
    (outside / "secret.txt").write_text("VERSION = 'read from outside the roots'\n")
    (proj / "link.py").symlink_to(victim)
    (work / "variants" / "evil.py").write_text("echo pwned\n")
    (work / "variants" / "fast.py").write_text("VERSION = 'fast'\n")
    (work / "patches" / "stale.patch").write_text(_patch("kernel.py", "VERSION = 'moved on'\n", "VERSION = 'fast'\n"))
    (work / "patches" / "dotdot.patch").write_text(_patch("../../outside/bashrc", VICTIM, "echo pwned\n"))
    (work / "patches" / "gitdir.patch").write_text(_patch(".git/config", "[core]\n", "[core] fsmonitor = x\n"))
    (work / "patches" / "notpatch.patch").write_text(VICTIM)
    spec = '[proposal.spec]\nbaseline = "proj/kernel.py:f"\ninputs = "proj/kernel.py:g"\nshapes = [{M = 1}]\n'
    bad_spec = spec + 'candidate = "proj/kernel.py:f"\ndtype = "int8"\ndevice = "cpu"\n'
    apply = {
        "absolute": f'file = "{victim}"\nwith = "variants/evil.py"',
        "dotdot": 'file = "../outside/bashrc"\nwith = "variants/evil.py"',
        "symlink": 'file = "proj/link.py"\nwith = "variants/evil.py"',
        "gitdir": 'file = "proj/.git/config"\nwith = "variants/evil.py"',
        "repo-root": 'patch = "patches/stale.patch"\nrepo = "/"',
        "patch-dotdot": 'patch = "patches/dotdot.patch"\nrepo = "proj"',
        "patch-git": 'patch = "patches/gitdir.patch"\nrepo = "proj"',
        "stale-patch": 'patch = "patches/stale.patch"\nrepo = "proj"',
        "not-a-patch": 'patch = "patches/notpatch.patch"\nrepo = "proj"',
        "int8-spec": 'file = "proj/kernel.py"\nwith = "variants/fast.py"',
        "with-outside": f'file = "proj/kernel.py"\nwith = "{outside / "secret.txt"}"',
    }
    text = ""
    for pid, what in LOOP_ESCAPES.items():
        s = bad_spec if pid in ("int8-spec", "with-outside") else spec
        text += f'[[proposal]]\nid = "{pid}"\ntext = "{what}"\n{s}[proposal.apply]\n{apply[pid]}\n\n'
    (work / "proposals.toml").write_text(text)
    return {"work": work, "proj": proj, "victim": victim, "proposals": work / "proposals.toml",
            "kernel": proj / "kernel.py"}


MARKERS = ("FSMONITOR_RAN", "CLEAN_FILTER_RAN", "HOOK_RAN", "TEXTCONV_RAN", "EXTDIFF_RAN")


def fsmonitor_repo(root: Path) -> Path:
    """A git repository whose config runs a program on every command that would let it: core.fsmonitor, a
    clean filter (required) and a textconv/external diff on *.py, a post-index-change hook. Each program
    only creates a marker file (``MARKERS``) beside the repository, so a test sees whether it ran. The
    script is left modified (so ``git status`` has work to do). Returns the repository."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    (repo / "bench.py").write_text("print(1)\n")
    _sh_git(repo, "init", "-q")
    _sh_git(repo, "add", ".")
    _sh_git(repo, "commit", "-q", "-m", "base")
    mark = {m: root / m for m in MARKERS}
    (repo / ".gitattributes").write_text("*.py filter=evil diff=evil\n")
    for key, value in (("core.fsmonitor", f"touch {mark['FSMONITOR_RAN']}; false"),
                       ("filter.evil.clean", f"touch {mark['CLEAN_FILTER_RAN']}; cat"),
                       ("filter.evil.required", "true"),
                       ("diff.evil.textconv", f"touch {mark['TEXTCONV_RAN']}; cat"),
                       ("diff.external", f"touch {mark['EXTDIFF_RAN']}; true")):
        _sh_git(repo, "config", key, value)
    hook = repo / ".git" / "hooks" / "post-index-change"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f"#!/bin/sh\ntouch {mark['HOOK_RAN']}\n")
    hook.chmod(0o755)
    (repo / "bench.py").write_text("print(2)\n")
    return repo


SECRET_LINE = "root:x:0:0:kernelscope-secret-line:/root:/bin/bash"
TOKEN = "ghp_" + "kernelscopeHostileToken0123456789"


def ledger_inputs(root: Path) -> dict[str, Path]:
    """Files a hostile caller hands the ledger: a 'patch' that is a password file, a real patch, a foreign
    SQLite file, an empty file, a validation result 900 levels deep, and one whose reasons carry a token."""
    import json
    import sqlite3

    root.mkdir(parents=True, exist_ok=True)
    out = {"passwd": root / "passwd", "patch": root / "ok.patch", "foreign": root / "foreign.db",
           "empty": root / "empty.db", "deep": root / "deep.json", "token": root / "token.json"}
    out["passwd"].write_text(SECRET_LINE + "\n")
    out["patch"].write_text(_patch("kernel.py", LOOP_BASE, "VERSION = 'fast'\n"))
    con = sqlite3.connect(out["foreign"])
    con.execute("CREATE TABLE accounts (name TEXT, balance INTEGER)")
    con.execute("INSERT INTO accounts VALUES ('a', 1)")
    con.commit()
    con.close()
    out["empty"].write_bytes(b"")
    out["deep"].write_text('{"accepted": false, "verdict": "error", "x": ' + "[" * 900 + "]" * 900 + "}")
    out["token"].write_text(json.dumps({"accepted": False, "verdict": "error",
                                        "reasons": [f"candidate raised: auth failed for token {TOKEN}"]}))
    return out


def deep_documents(root: Path, depth: int = 5000) -> dict[str, Path]:
    """A proposals file and a validate spec whose one value nests ``depth`` arrays deep (the TOML parser
    recurses: a RecursionError without the bound)."""
    root.mkdir(parents=True, exist_ok=True)
    deep = "[" * depth + "]" * depth
    out = {"proposals": root / "deep_proposals.toml", "spec": root / "deep_spec.toml"}
    out["proposals"].write_text(f'[[proposal]]\nid = "deep"\nspec = "spec.toml"\nx = {deep}\n')
    out["spec"].write_text(f'baseline = "a.py:f"\nshapes = {deep}\n')
    return out


def validate_escapes(root: Path) -> dict[str, Path]:
    """Candidates for tests/fixtures/validate/cpu.toml's spec (import its base.py) that attack the machine:
    ``cand_double_fork.py`` starts a process that double-forks and calls setsid (it records its pid in the file
    named by $KS_STRAY_PID) and returns a wrong result; ``cand_fill_memory.py`` allocates 64 MiB blocks,
    touching every page, until it is stopped."""
    root.mkdir(parents=True, exist_ok=True)
    out = {"double_fork": root / "cand_double_fork.py", "fill_memory": root / "cand_fill_memory.py"}
    out["double_fork"].write_text(
        '"""Hostile: leaves a detached grandchild behind (double fork + setsid), then answers wrongly."""\n'
        "import os\nimport subprocess\nimport sys\nimport time\n\n"
        "STRAY = ('import os, sys, time\\nos.setsid()\\nif os.fork():\\n    os._exit(0)\\n'\n"
        "         'open(sys.argv[1] + \".tmp\", \"w\").write(str(os.getpid()))\\n'\n"
        "         'os.rename(sys.argv[1] + \".tmp\", sys.argv[1])\\ntime.sleep(600)\\n')\n\n\n"
        "def candidate(x, w):\n"
        "    pid_file = os.environ['KS_STRAY_PID']\n"
        "    if not os.path.exists(pid_file + '.started'):\n"
        "        open(pid_file + '.started', 'w').close()\n"
        "        subprocess.Popen([sys.executable, '-c', STRAY, pid_file]).wait()\n"
        "        while not os.path.exists(pid_file):\n"
        "            time.sleep(0.01)\n"
        "    return (x @ w) * 0 + 1\n")
    out["fill_memory"].write_text(
        '"""Hostile: fills memory, 64 MiB at a time, every page touched."""\n\n'
        "HOLD = []\n\n\n"
        "def candidate(x, w):\n"
        "    while True:\n"
        "        HOLD.append(bytearray(b'\\x01') * (64 << 20))\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/hostile")
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    xlsx_max_cell(out / "xlsx_max_cell.xlsx")
    xlsx_dimension(out / "xlsx_dimension.xlsx")
    xlsx_sparse_grid(out / "xlsx_sparse_grid.xlsx")
    xlsx_long_string(out / "xlsx_long_string.xlsx")
    xlsx_string_fanout(out / "xlsx_string_fanout.xlsx")
    xlsx_zip_ratio(out / "xlsx_zip_ratio.xlsx")
    with tempfile.TemporaryDirectory() as t:
        base = _base_report(Path(t))
        xlsx_bad_crc(out / "xlsx_bad_crc.xlsx", base)
        xlsx_bad_deflate(out / "xlsx_bad_deflate.xlsx", base)
        xlsx_sheet_paren(out / "xlsx_sheet_paren.xlsx", base)
        xlsx_inf_number(out / "xlsx_inf_number.xlsx", base)
        xlsx_sheetdata_junk(out / "xlsx_sheetdata_junk.xlsx", base)
    trace_deep(out / "trace_deep.json.gz")
    trace_deep_meta(out / "trace_deep_meta.json.gz")
    trace_nonfinite(out / "trace_nonfinite.json")
    gzip_zeros(out / "trace_zeros.json.gz", 128)
    categories_long_field(out / "categories_long_field.csv")
    disclosure_and_bounds(out)


if __name__ == "__main__":
    main()
