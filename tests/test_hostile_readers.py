"""Hostile inputs against the file readers (issue 14): each reproducer in tests/fixtures/hostile (made by
tools/make_hostile_inputs.py) or built here from a small recipe gives one typed error line naming the file
and the problem (or a clean result), the CLI exits 2 without a traceback, and memory stays bounded.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, TRACES

from mcp_server.core.errors import (
    BufferFormatError,
    CategoriesError,
    InputError,
    KernelscopeError,
    LimitError,
    ReportFormatError,
    TraceFormatError,
)
from mcp_server.reports import read_report
from mcp_server.reports.guard import check_xlsx, clear_cache
from mcp_server.timeline.analysis import analyze_timeline
from mcp_server.timeline.decode import decode_buffer, event_name_list
from mcp_server.traces import analyze_trace

HOSTILE = FIXTURES / "hostile"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_hostile_inputs as recipes  # noqa: E402


def _one_line(exc: BaseException, path, *words: str) -> str:
    msg = str(exc)
    assert "\n" not in msg, msg
    if path is not None:
        assert str(path) in msg, msg
    for w in words:
        assert w.lower() in msg.lower(), msg
    return msg


_HWM_MAIN = (
    "import atexit, os, sys\n"
    "def _hwm():\n"
    "    with open('/proc/self/status') as f, open(os.environ['KS_HWM_FILE'], 'w') as out:\n"
    "        out.write(next(ln for ln in f if ln.startswith('VmHWM:')))\n"
    "atexit.register(_hwm)\n"
    "from mcp_server.faces.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n")


def _cli_rss(args: list[str], env: dict | None = None, timeout: float = 120) -> tuple[int, str, str, float]:
    """(exit code, stdout, stderr, peak RSS in MiB) of ``kernelscope ARGS`` in a child process; the peak is
    the child's own VmHWM (``ru_maxrss`` from wait4 would include this process's RSS at the fork)."""
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".hwm") as hwm:
        e = dict(os.environ, COLUMNS="200", KS_HWM_FILE=hwm.name, **(env or {}))
        try:
            p = subprocess.run([sys.executable, "-c", _HWM_MAIN, *args], capture_output=True, env=e, cwd=ROOT,
                               timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"kernelscope {' '.join(args)} ran over {timeout} s") from None
        text = open(hwm.name).read().split()
    rss = int(text[1]) / 1024 if len(text) > 1 else float("nan")
    return p.returncode, p.stdout.decode(), p.stderr.decode(), rss


def _clean_cli_error(code: int, err: str, path, *words: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return _one_line(Exception(lines[0]), path, *words)


# ----------------------------------------------------------------------------- traces


def test_deep_json_in_an_event_is_a_typed_error():
    with pytest.raises(TraceFormatError) as ei:
        analyze_trace(HOSTILE / "trace_deep.json.gz")
    _one_line(ei.value, HOSTILE / "trace_deep.json.gz", "nested too deeply")


def test_deep_json_in_the_metadata_is_a_typed_error():
    with pytest.raises(TraceFormatError) as ei:
        analyze_trace(HOSTILE / "trace_deep_meta.json.gz")
    _one_line(ei.value, HOSTILE / "trace_deep_meta.json.gz", "nested too deeply")


@pytest.mark.parametrize("doc", [
    "[" * 100_000 + "]" * 100_000,                                           # a bare deep array (whole decode)
    '{"traceEvents":[],"x":' + "[" * 100_000 + "]" * 100_000 + "}",          # deep trailer
    '{"traceEvents":[{"cat":"cpu_op","name":"m","ts":1,"dur":1,"pid":1,"tid":1,"args":{"Input Dims":'
    + "[" * 100_000 + "]" * 100_000 + "}}]}",                               # deep Input Dims
])
def test_deep_json_anywhere_is_a_typed_error(tmp_path, doc):
    p = tmp_path / "deep.json"
    p.write_text(doc)
    with pytest.raises(TraceFormatError) as ei:
        analyze_trace(p)
    _one_line(ei.value, p, "nested too deeply")


def test_non_finite_and_negative_durations_are_skipped_and_warned():
    res = analyze_trace(HOSTILE / "trace_nonfinite.json")
    # five kernels: 1e308 twice (the sum would overflow), 1e999 (not a float64), -5 and one real 7 us
    assert res.kernel_count == 1
    assert res.total_kernel_us == pytest.approx(7.0)
    w = [x for x in res.warnings if x.code == "damaged_events"]
    assert w and w[0].count == 4
    text = json.dumps(res.model_dump(mode="json"), allow_nan=False)  # valid JSON: no Infinity / NaN
    assert "Infinity" not in text and "NaN" not in text


def test_non_finite_durations_give_valid_json_on_the_cli():
    code, out, err, _ = _cli_rss(["analyze", str(HOSTILE / "trace_nonfinite.json"), "--json"])
    assert code == 0, err
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
    assert doc["total_kernel_us"] == pytest.approx(7.0)


def test_gzip_of_zeros_stops_at_the_ratio_guard():
    p = HOSTILE / "trace_zeros.json.gz"
    with pytest.raises(LimitError) as ei:
        analyze_trace(p)
    _one_line(ei.value, p, "compression ratio", "KERNELSCOPE_MAX_TRACE_RATIO")


def test_gzip_of_zeros_with_the_ratio_raised_stops_at_the_unstreamed_cap(monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_MAX_TRACE_RATIO", "1000000")
    monkeypatch.setenv("KERNELSCOPE_MAX_TRACE_UNSTREAMED_BYTES", "96M")
    p = HOSTILE / "trace_zeros.json.gz"
    with pytest.raises(LimitError) as ei:
        analyze_trace(p)
    _one_line(ei.value, p, "cannot be streamed", "KERNELSCOPE_MAX_TRACE_UNSTREAMED_BYTES")


def test_decompressed_size_guard(monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_MAX_TRACE_BYTES", "100K")
    p = TRACES / "llama_prefill_sdpa.json.gz"  # about 450 KB of JSON once decompressed
    with pytest.raises(LimitError) as ei:
        analyze_trace(p)
    _one_line(ei.value, p, "decompressed trace text", "KERNELSCOPE_MAX_TRACE_BYTES")


def test_the_4mb_gzip_of_zeros_on_the_cli_is_one_line_and_small(tmp_path):
    p = tmp_path / "zeros.json.gz"
    recipes.gzip_zeros(p, 4096)  # the reproducer: 4 MB on disk, 4 GiB of zeros
    assert p.stat().st_size < 5 << 20
    code, _, err, rss = _cli_rss(["analyze", str(p)])
    _clean_cli_error(code, err, p, "compression ratio")
    assert rss < 400, f"peak RSS {rss:.0f} MiB"  # measured 223 MiB (the guard stops at 72 MiB of text)


def test_bare_event_array_streams_like_the_object_form(tmp_path):
    doc = json.loads(gzip.decompress((TRACES / "llama_prefill_sdpa.json.gz").read_bytes()))
    p = tmp_path / "bare.json"
    p.write_text(json.dumps(doc["traceEvents"]))
    a, b = analyze_trace(TRACES / "llama_prefill_sdpa.json.gz"), analyze_trace(p)
    assert b.kernel_count == a.kernel_count and b.total_kernel_us == pytest.approx(a.total_kernel_us)


def test_large_metadata_before_the_events_still_streams(tmp_path, monkeypatch):
    doc = json.loads(gzip.decompress((TRACES / "llama_prefill_sdpa.json.gz").read_bytes()))
    events = doc.pop("traceEvents")
    doc["kernelscope_fixture"] = "m" * (12 << 20)  # 12 MiB of metadata: the events start past block 1
    doc["traceEvents"] = events
    p = tmp_path / "late.json"
    p.write_text(json.dumps(doc))
    monkeypatch.setenv("KERNELSCOPE_MAX_TRACE_UNSTREAMED_BYTES", "1M")  # proves no whole-text fallback
    a, b = analyze_trace(TRACES / "llama_prefill_sdpa.json.gz"), analyze_trace(p)
    assert b.kernel_count == a.kernel_count


# ----------------------------------------------------------------------------- xlsx


XLSX_CASES = [
    ("xlsx_max_cell.xlsx", LimitError, ("XFD1048576", "KERNELSCOPE_MAX_XLSX_CELLS", "GPU Kernels")),
    ("xlsx_dimension.xlsx", LimitError, ("XFD1048576", "KERNELSCOPE_MAX_XLSX_CELLS")),
    ("xlsx_sparse_grid.xlsx", LimitError, ("T1000000", "20,000,000 cells", "only 2 hold a value",
                                          "KERNELSCOPE_MAX_XLSX_EMPTY_CELLS")),
    ("xlsx_long_string.xlsx", LimitError, ("shared string 0", "8 MiB", "KERNELSCOPE_MAX_XLSX_STRING_BYTES")),
    ("xlsx_string_fanout.xlsx", LimitError, ("expand to", "KERNELSCOPE_MAX_XLSX_TEXT_BYTES")),
    ("xlsx_zip_ratio.xlsx", LimitError, ("compression ratio", "KERNELSCOPE_MAX_XLSX_RATIO")),
    ("xlsx_bad_crc.xlsx", ReportFormatError, ("damaged zip member", "Bad CRC-32")),
    ("xlsx_bad_deflate.xlsx", ReportFormatError, ("damaged zip member", "deflate")),
    ("xlsx_inf_number.xlsx", ReportFormatError, ("Kernels (full)", "cell D2", "1e999", "not finite")),
]


@pytest.mark.parametrize("name,exc,words", XLSX_CASES, ids=[c[0] for c in XLSX_CASES])
def test_xlsx_reproducers_are_typed_errors_before_calamine(name, exc, words):
    p = HOSTILE / name
    clear_cache()
    with pytest.raises(exc) as ei:
        read_report(p)
    _one_line(ei.value, p, *words)


def test_a_sheet_named_like_the_full_table_reads():
    rep = read_report(HOSTILE / "xlsx_sheet_paren.xlsx", need=("kernels", "gpu_kernels", "summary"))
    assert "Kernels (full" in rep.sheets and rep.kernels_from == "full" and len(rep.kernels) > 0


@pytest.mark.parametrize("verb", ["budget", "compare"])
def test_xlsx_bomb_on_the_cli_is_one_line_and_small(verb):
    p = HOSTILE / "xlsx_max_cell.xlsx"
    code, _, err, rss = _cli_rss([verb, str(p), str(p)])
    _clean_cli_error(code, err, p, "KERNELSCOPE_MAX_XLSX_CELLS")
    assert rss < 300, f"peak RSS {rss:.0f} MiB"  # measured 99 MiB; without the guard the process aborts


def test_long_shared_string_on_the_cli_is_one_line_and_small():
    p = HOSTILE / "xlsx_long_string.xlsx"
    code, _, err, rss = _cli_rss(["budget", str(p), str(p)])
    _clean_cli_error(code, err, p, "shared string")
    assert rss < 300, f"peak RSS {rss:.0f} MiB"  # measured 107 MiB; 6.5 GB before the guard


def test_recategorize_of_a_damaged_report_names_the_member(tmp_path):
    from mcp_server.compare.recategorize import recategorize

    p = tmp_path / "r.xlsx"
    p.write_bytes((HOSTILE / "xlsx_bad_crc.xlsx").read_bytes())
    with pytest.raises(ReportFormatError) as ei:
        recategorize([str(p)])
    _one_line(ei.value, p, "Bad CRC-32")
    assert p.read_bytes() == (HOSTILE / "xlsx_bad_crc.xlsx").read_bytes()


def test_recategorize_patcher_errors_name_the_file(tmp_path):
    from mcp_server.compare.recategorize import recategorize

    p = tmp_path / "junk.xlsx"
    p.write_bytes((HOSTILE / "xlsx_sheetdata_junk.xlsx").read_bytes())
    cats = tmp_path / "c.csv"
    cats.write_text("category,pattern\nzzz,rsqrt\nelementwise,.*\n")
    with pytest.raises(KernelscopeError) as ei:
        recategorize([str(p)], categories=str(cats))
    _one_line(ei.value, p)


def test_xlsx_limits_can_be_raised(monkeypatch, tmp_path):
    p = HOSTILE / "xlsx_long_string.xlsx"
    monkeypatch.setenv("KERNELSCOPE_MAX_XLSX_STRING_BYTES", "16M")
    clear_cache()
    with pytest.raises(LimitError) as ei:  # the next bound still holds: 800 cells x 8 MiB of text
        check_xlsx(p)
    _one_line(ei.value, p, "KERNELSCOPE_MAX_XLSX_TEXT_BYTES")


def test_real_reports_pass_the_guard():
    for p in sorted((FIXTURES / "upstream").glob("*.xlsx")):
        clear_cache()
        check_xlsx(p)


# ----------------------------------------------------------------------------- timeline


def test_a_300_char_event_name_is_a_typed_error():
    name = "x" * 300
    with pytest.raises(InputError) as ei:
        event_name_list(name)
    _one_line(ei.value, None, "300 characters", "KERNELSCOPE_MAX_EVENT_NAME")
    with pytest.raises(InputError):
        analyze_timeline(FIXTURES / "timeline" / "balanced_probe.bin", event_names=name)


def test_a_names_path_too_long_for_the_os_is_not_a_crash():
    with pytest.raises(KernelscopeError):
        event_name_list("y" * 300 + ".events")


def test_buffer_size_bound(monkeypatch, tmp_path):
    p = tmp_path / "big.bin"
    recipes.big_buffer(p, 8 << 20)
    monkeypatch.setenv("KERNELSCOPE_MAX_BUFFER_BYTES", "4M")
    with pytest.raises(LimitError) as ei:
        decode_buffer(p)
    _one_line(ei.value, p, "probe buffer", "KERNELSCOPE_MAX_BUFFER_BYTES")


def test_npy_header_claiming_more_than_the_file_holds(tmp_path):
    p = tmp_path / "claim.npy"
    hdr = "{'descr': '<u8', 'fortran_order': False, 'shape': (1099511627776,), }"
    hdr = hdr + " " * (117 - len(hdr)) + "\n"
    p.write_bytes(b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + b"\0" * 64)
    with pytest.raises(BufferFormatError) as ei:
        decode_buffer(p)
    _one_line(ei.value, p, ".npy")


def test_buffer_memory_is_bounded_by_its_size(tmp_path):
    p = tmp_path / "b16.bin"
    recipes.big_buffer(p, 16 << 20)
    code, out, err, rss = _cli_rss(["timeline", "analyze", str(p), "--json"])
    assert code == 0, err
    json.loads(out)
    # stated bound: decode + analysis hold about 16 x the buffer; the interpreter and imports ~150 MiB
    assert rss < 150 + 20 * 16, f"peak RSS {rss:.0f} MiB for a 16 MiB buffer"


def test_overhead_json_nested_deep_is_a_warning(tmp_path):
    buf = tmp_path / "b.bin"
    buf.write_bytes((FIXTURES / "timeline" / "balanced_probe.bin").read_bytes())
    (tmp_path / "b.overhead.json").write_text("[" * 100_000 + "]" * 100_000)
    res = analyze_timeline(buf)
    w = [x for x in res.warnings if x.code == "overhead_unreadable"]
    assert w and "nested too deeply" in w[0].message


def test_overhead_json_infinity_is_refused(tmp_path):
    from mcp_server.timeline.overhead import load_overhead

    p = tmp_path / "o.json"
    for doc in ('{"with_median_us": Infinity, "without_median_us": 1}',
                '{"with_probes_us": [1e999, 2], "without_probes_us": [1, 2]}'):
        p.write_text(doc)
        with pytest.raises(BufferFormatError) as ei:
            load_overhead(p)
        _one_line(ei.value, p, "not a probe overhead file")


# ----------------------------------------------------------------------------- rule CSVs


def test_csv_field_over_the_csv_limit_is_a_line_numbered_error():
    from mcp_server.core.categories import load_categories

    p = HOSTILE / "categories_long_field.csv"
    with pytest.raises(CategoriesError) as ei:
        load_categories(p)
    _one_line(ei.value, p, "line 3", "field larger than field limit")


def test_endless_rules_file_is_bounded(monkeypatch):
    from mcp_server.core.categories import load_categories

    monkeypatch.setenv("KERNELSCOPE_MAX_TEXT_FILE_BYTES", "1M")
    with pytest.raises(LimitError) as ei:
        load_categories("/dev/zero")
    _one_line(ei.value, "/dev/zero", "KERNELSCOPE_MAX_TEXT_FILE_BYTES")


def test_csv_long_field_on_the_cli():
    p = HOSTILE / "categories_long_field.csv"
    code, _, err, _ = _cli_rss(["analyze", str(TRACES / "llama_prefill_sdpa.json.gz"), "--categories", str(p)])
    _clean_cli_error(code, err, p, "line 3")


# ----------------------------------------------------------------------------- request models


def test_a_10mb_path_argument_is_refused_at_once():
    import pydantic

    from mcp_server.compare.requests import RecategorizeRequest
    from mcp_server.timeline.requests import AnalyzeTimelineRequest
    from mcp_server.traces.requests import AnalyzeTraceRequest

    huge = "x" * (10 << 20)
    t0 = time.perf_counter()
    for make in (lambda: AnalyzeTraceRequest(trace_path=huge),
                 lambda: AnalyzeTimelineRequest(buffer_path="b.bin", event_names=huge),
                 lambda: AnalyzeTimelineRequest(buffer_path="b.bin", event_names=["n"] * 5000),
                 lambda: AnalyzeTimelineRequest(buffer_path="b.bin", event_names=["n" * 201]),
                 lambda: RecategorizeRequest(paths=[huge]),
                 lambda: RecategorizeRequest(paths=["r.xlsx"] * 65)):
        with pytest.raises(pydantic.ValidationError) as ei:
            make()
        assert len(str(ei.value)) < 2000
    assert time.perf_counter() - t0 < 2.0


def test_request_bounds_are_in_the_tool_schemas():
    from mcp_server.compare.requests import DiffModulesRequest
    from mcp_server.refs.requests import FindReferencesRequest

    props = DiffModulesRequest.model_json_schema()["properties"]
    assert any(s.get("maxLength") == 4096 for s in props["a"].get("anyOf", [props["a"]]))
    props = FindReferencesRequest.model_json_schema()["properties"]
    assert props["keyword"]["maxLength"] == 200


def test_a_large_dense_report_passes_the_guard(tmp_path):
    from upstream_layout import make_large_report

    p = make_large_report(str(tmp_path / "large.xlsx"), sheets=6, rows=1000, seed=3)
    clear_cache()
    check_xlsx(p)
    assert len(read_report(p, need=("kernels",)).kernels) > 0


def test_raising_the_grid_limit_alone_raises_the_empty_cells_bound_too(monkeypatch):
    p = HOSTILE / "xlsx_sparse_grid.xlsx"
    monkeypatch.setenv("KERNELSCOPE_MAX_XLSX_CELLS", "30000000")
    clear_cache()
    check_xlsx(p)  # 20 M cells, 2 present: allowed once the user says grids this large are fine
    monkeypatch.setenv("KERNELSCOPE_MAX_XLSX_EMPTY_CELLS", "1000000")
    clear_cache()
    with pytest.raises(LimitError):
        check_xlsx(p)
