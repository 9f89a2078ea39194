"""``kernelscope analyze``: text summary, --json (identical to the tool result), -o xlsx, errors."""
from __future__ import annotations

import json

import pytest
from conftest import TRACES

from mcp_server.faces.cli import main
from mcp_server.traces import analyze_trace


def test_text_summary(capsys):
    assert main(["analyze", str(TRACES / "llama_prefill_sdpa.json.gz")]) == 0
    out = "".join(capsys.readouterr().out.split())  # the text face wraps at 80 columns wherever the path ends
    assert "NVIDIAH200" in out and "Categories" in out and "LlamaAttention" in out


def test_json_matches_engine(capsys):
    path = TRACES / "llama_decode_mixed.json.gz"
    assert main(["analyze", str(path), "--json", "--detail"]) == 0
    data = json.loads(capsys.readouterr().out)
    ref = analyze_trace(path).model_dump(mode="json")
    assert data == ref
    assert data["graph"]["attributed_count"] == 399


def test_reference_trace_flag(capsys):
    assert main(["analyze", str(TRACES / "llama_decode_graph.json.gz"), "--reference-trace",
                 str(TRACES / "llama_decode_mixed.json.gz"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["graph"]["method"] == "reference-trace" and data["unattributed_count"] == 0


def test_bad_input_exit_2(tmp_path, capsys):
    p = tmp_path / "x.json"
    p.write_text('{"foo": 1}')
    assert main(["analyze", str(p)]) == 2
    err = capsys.readouterr().err
    assert "traceEvents" in err and "x.json" in err


def test_output_xlsx(tmp_path, capsys):
    pytest.importorskip("mcp_server.reports.xlsx_writer")
    openpyxl = pytest.importorskip("openpyxl")
    out = tmp_path / "report.xlsx"
    assert main(["analyze", str(TRACES / "llama_prefill_eager.json.gz"), "-o", str(out)]) == 0
    assert out.exists()
    wb = openpyxl.load_workbook(out, read_only=True)
    assert {"Summary", "Overview", "Module Tree", "GPU Kernels"} <= set(wb.sheetnames)
    assert "report written" in capsys.readouterr().out
