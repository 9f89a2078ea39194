"""Issue 13: kernelscope's report fills the TFLOP columns as upstream does, and rates them against the peak."""
from __future__ import annotations

from pathlib import Path

import pytest
from python_calamine import CalamineWorkbook

from mcp_server.reports import layout as L
from mcp_server.reports.flops import launch_flops
from mcp_server.traces import analyze_trace

FIX = Path(__file__).parent / "fixtures"


def _detail_rows(path, sheet):
    rows = CalamineWorkbook.from_path(str(path)).get_sheet_by_name(sheet).to_python()
    h = next(i for i, r in enumerate(rows) if r and r[0] == "Module" and "Kernel Name" in r)
    head = [str(x) for x in rows[h]]
    return [dict(zip(head, r)) for r in rows[h + 1:] if r and r[2]]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    p = tmp_path_factory.mktemp("rep") / "sdpa.xlsx"
    analyze_trace(str(FIX / "traces" / "llama_prefill_sdpa.json.gz"), output_xlsx=str(p))
    return p


def test_tflop_columns_filled_for_gemms_and_attention(report):
    rows = _detail_rows(report, "LlamaDecoderLayer (pre)")
    gemm = [r for r in rows if r["Category"] in ("gemm", "attention")]
    assert len(gemm) == 8  # the 7 Linear GEMMs and the cuDNN flash attention of one decoder layer
    for r in gemm:
        assert r["Formula"] and r["TFLOP"] > 0 and r["TFLOPs"] > 0, r
        assert r["TFLOPs"] == pytest.approx(r["TFLOP"] / (r["Duration (us)"] / 1e6), rel=0.01)
        assert 0 < r[L.PEAK_HEADER] < 100  # against the H200's measured 790 TFLOP/s
    q = next(r for r in gemm if r["Module"] == "Linear_0")
    assert q["Input Dims"] == "[[128,512],[512,512]]" and q["TFLOP"] == pytest.approx(2 * 128 * 512 * 512 / 1e12,
                                                                                     rel=0.01)
    att = next(r for r in gemm if r["Category"] == "attention")
    assert att["Formula"] == "2*B*H*Sq*Skv*(Dqk+Dv)"
    assert att["TFLOP"] == pytest.approx(2 * 1 * 8 * 128 * 128 * (64 + 64) / 1e12, rel=0.01)
    assert not any(r["TFLOP"] for r in rows if r["Category"] == "elementwise")


def test_tflop_agrees_with_the_upstream_report():
    """The upstream report of the same trace: TFLOP per (module, dims) of its GEMMs is ours."""
    up = _detail_rows(FIX / "upstream" / "llama_prefill_sdpa.xlsx", "LlamaDecoderLayer")
    checked = 0
    for r in up:
        if r["Category"] != "gemm" or not r["TFLOP"]:
            continue
        got = launch_flops("aten::mm", str(r["Input Dims"]).replace(" ", ""))
        assert got is not None and got[1] / 1e12 == pytest.approx(float(r["TFLOP"]), rel=0.02)
        checked += 1
    assert checked >= 7


def test_flop_formulas_on_trace_ops():
    assert launch_flops("aten::addmm", "[[512],[128,512],[512,512],[],[]]") == ("2*M*K*N", 2.0 * 128 * 512 * 512)
    assert launch_flops("aten::linear", "[[1,128,512],[1408,512],[]]") == ("2*M*K*N", 2.0 * 128 * 512 * 1408)
    assert launch_flops("aten::bmm", "[[8,128,64],[8,64,128]]") == ("2*B*M*K*N", 2.0 * 8 * 128 * 64 * 128)
    # decode's flash kernel: [B, S, H, D] layout
    assert launch_flops("aten::_flash_attention_forward", "[[8,1,8,64],[8,1,2,64],[8,1,2,64],[],[]]")[1] == (
        2.0 * 8 * 8 * 1 * 1 * 128)
    assert launch_flops("aten::_softmax", "[[1,8,128,128],[],[]]") is None
    assert launch_flops("aten::mm", "") is None
