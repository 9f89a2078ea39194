"""budget on the real H200 fixtures, on kernelscope reports and on upstream-layout reports."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from upstream_layout import UDetail, UKernel, UpstreamSpec, build_upstream_report

from mcp_server.compare.budget import budget
from mcp_server.compare.inputs import load_side
from mcp_server.core.errors import FileMissingError, InputError, ReportFormatError

TRACES = Path(__file__).parent / "fixtures" / "traces"
EAGER = TRACES / "llama_prefill_eager.json.gz"
SDPA = TRACES / "llama_prefill_sdpa.json.gz"
GRAPH = TRACES / "llama_decode_graph.json.gz"
MIXED = TRACES / "llama_decode_mixed.json.gz"
DSV3 = TRACES / "dsv3_prefill.json.gz"


def _shares_sum_100(res):
    assert math.isclose(sum(r.a_pct for r in res.rows), 100.0, abs_tol=1e-6)
    assert math.isclose(sum(r.b_pct for r in res.rows), 100.0, abs_tol=1e-6)


def test_budget_eager_vs_sdpa_prefill():
    res = budget(EAGER, SDPA, labels=["eager", "sdpa"])
    _shares_sum_100(res)
    assert (res.a.label, res.b.label) == ("eager", "sdpa")
    assert [abs(r.gap_us) for r in res.rows] == sorted((abs(r.gap_us) for r in res.rows), reverse=True)
    for r in res.rows:
        assert math.isclose(r.gap_us, r.b_us - r.a_us)
        if r.a_us > 0:
            assert math.isclose(r.ratio, r.b_us / r.a_us)
    assert math.isclose(res.total_a_us, sum(r.a_us for r in res.rows))
    assert res.a.kernel_count == 136 and res.b.kernel_count == 110  # kernels + memcpy/memset of each trace
    by = {r.category: r for r in res.rows}
    # sdpa replaced eager's QK^T / PV GEMMs with one fused kernel: fewer GEMM launches
    assert by["gemm"].b_count < by["gemm"].a_count
    # the fused attention kernel costs more than the eager softmax it replaced
    assert by["attention"].b_us > by["attention"].a_us
    assert not res.mismatches  # traces are categorised with the current rules


def test_budget_on_cuda_graph_decode():
    res = budget(MIXED, GRAPH)
    _shares_sum_100(res)
    assert res.b.kernel_count == 399  # every kernel of the graph-only trace is budgeted
    # replays alone, no marker, no reference: phase 'graph' (replayed, phase unknown), not a selectable phase
    assert res.b.phases_present == [] and res.a.phases_present == ["decode"]
    by = {r.category: r for r in res.rows}
    assert by["gemm"].b_count > 0 and by["attention"].b_count > 0


def test_json_rows_carry_the_contract_fields():
    data = json.loads(budget(EAGER, SDPA).model_dump_json())
    assert {"category", "a_us", "b_us", "gap_us", "ratio"} <= set(data["rows"][0])


def test_phase_filter(tmp_path):
    res = budget(MIXED, GRAPH, phase="decode")
    assert res.a.phase == "decode"
    with pytest.raises(InputError, match="no prefill kernels"):
        budget(MIXED, GRAPH, phase="prefill")
    with pytest.raises(InputError, match="budget: invalid argument.*phase: Input should be 'prefill' or 'decode'"):
        budget(MIXED, GRAPH, phase="extend-ish")


def _upstream_from_trace(trace: Path, out: Path, layout: str, *, rename: dict[str, str] | None = None) -> Path:
    """An upstream-layout report holding the trace's kernels, one detail sheet per decoder layer type."""
    k = load_side(trace).kernels
    rename = rename or {}
    kernels = []
    for r in k.itertuples(index=False):
        cat = rename.get(r.category, r.category)
        kernels.append(UKernel(r.module or "", r.name, float(r.dur_us), cat, ts=float(r.ts_us)))
    det = UDetail("LlamaForCausalLM", "LlamaForCausalLM_0", "prefill", "", kernels)
    spec = UpstreamSpec(details=[det], all_kernels=[(x.name, x.category, x.dur, "LlamaForCausalLM") for x in kernels],
                        root_type="LlamaForCausalLM")
    build_upstream_report(str(out), spec, layout)
    return out


@pytest.mark.parametrize("layout", ["old", "new"])
def test_upstream_report_uses_gpu_kernels_and_lists_category_mismatches(tmp_path, layout):
    # The report stores 'attention' kernels (softmax) as 'elementwise', as an older rules file did.
    rep = _upstream_from_trace(EAGER, tmp_path / f"eager_{layout}.xlsx", layout, rename={"attention": "elementwise"})
    res = budget(rep, SDPA)
    assert res.a.kind == "upstream-report" and res.a.source_table == "GPU Kernels"
    assert not res.a.truncated
    _shares_sum_100(res)
    # recategorised with the current rules: the softmax is back in 'attention'
    by = {r.category: r for r in res.rows}
    assert by["attention"].a_us > 0
    assert res.mismatches and all(m.stored == "elementwise" and m.current == "attention" for m in res.mismatches)
    assert any("softmax" in m.kernel for m in res.mismatches)
    # totals agree with the trace within the report's 0.1 us rounding per kernel name
    trace = budget(EAGER, SDPA)
    assert math.isclose(res.total_a_us, trace.total_a_us, abs_tol=0.05 * len(set(load_side(EAGER).kernels["name"])))


def test_truncated_upstream_gpu_kernels_is_reported(tmp_path):
    # 1200 distinct generated kernels (torch.compile style names): upstream keeps the first 1000
    names = [(f"triton_poi_fused_add_mul_{i}", "elementwise", 1.0 + (i % 7), "LlamaMLP") for i in range(1200)]
    det = UDetail("LlamaMLP", "LlamaMLP_0", "prefill", "LlamaForCausalLM_0",
                  [UKernel("LlamaMLP_0", n, d, c) for n, c, d, _ in names[:50]])
    rep = tmp_path / "big.xlsx"
    build_upstream_report(str(rep), UpstreamSpec(details=[det], all_kernels=names, root_type="LlamaForCausalLM"), "new")
    res = budget(rep, EAGER)
    assert res.a.truncated
    assert any(w.code == "gpu_kernels_truncated" for w in res.warnings)
    assert res.a.kernel_count < 1200 * 1  # launches past the cap are lost: the budget is a lower bound
    _shares_sum_100(res)


def test_kernelscope_report_side(tmp_path):
    from mcp_server.traces import analyze_trace

    out = tmp_path / "eager.xlsx"
    analyze_trace(str(EAGER), output_xlsx=str(out))
    res = budget(out, EAGER)
    assert res.a.kind == "kernelscope-report" and res.a.source_table == "kernels"
    assert all(math.isclose(r.gap_us, 0.0, abs_tol=1e-3) for r in res.rows)
    assert not res.mismatches


def test_bad_inputs_name_the_file(tmp_path):
    with pytest.raises(FileMissingError, match="nope.json.gz"):
        budget(tmp_path / "nope.json.gz", EAGER)
    txt = tmp_path / "notes.txt"
    txt.write_text("hello")
    with pytest.raises(InputError, match="notes.txt"):
        budget(txt, EAGER)
    fake = tmp_path / "fake.xlsx"
    fake.write_text("not a workbook")
    with pytest.raises(ReportFormatError, match="fake.xlsx"):
        budget(fake, EAGER)
    with pytest.raises(InputError, match="labels"):
        budget(EAGER, SDPA, labels=["only-one"])
