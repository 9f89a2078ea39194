"""diff_modules on the real H200 fixtures (Llama eager/sdpa prefill, DeepSeek-V3 MLA+MoE prefill)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from upstream_layout import UDetail, UKernel, UpstreamSpec, build_upstream_report

from mcp_server.compare.blocks import assign_blocks, load_blocks, parse_blocks
from mcp_server.compare.diff import diff_modules
from mcp_server.compare.inputs import load_side
from mcp_server.core.errors import CategoriesError

TRACES = Path(__file__).parent / "fixtures" / "traces"
EAGER = TRACES / "llama_prefill_eager.json.gz"
SDPA = TRACES / "llama_prefill_sdpa.json.gz"
DSV3 = TRACES / "dsv3_prefill.json.gz"


@pytest.fixture(scope="module")
def eager_vs_sdpa():
    return diff_modules(EAGER, SDPA, labels=["eager", "sdpa"])


def _block(res, name):
    return next(b for b in res.blocks if b.block == name)


def test_blocks_of_a_two_layer_llama():
    k = assign_blocks(load_side(EAGER).kernels, load_blocks())
    counts = k.groupby("block").size()
    # q, k, v (three Linear_N inside LlamaAttention) per layer: one group each layer
    assert counts["attn_qkv_proj"] == 6
    assert counts["attn_o_proj"] == 2  # the Linear after the attention core
    assert counts["mlp_gate_up_proj"] == 4 and counts["mlp_down_proj"] == 2
    assert counts["lm_head"] == 1 and counts["embedding"] == 1
    qkv_groups = k[k["block"] == "attn_qkv_proj"]["group"].nunique()
    assert qkv_groups == 2  # consecutive kernels of one module type form one group
    assert "softmax" in " ".join(k[k["block"] == "attn_core"]["name"])


def test_blocks_of_deepseek_v3_mla_moe():
    k = assign_blocks(load_side(DSV3).kernels, load_blocks())
    blocks = set(k["block"])
    assert {"moe_gate", "moe_experts", "moe_shared_experts", "attn_norm", "attn_core"} <= blocks
    # MLA: q_a, q_b, kv_a, kv_b come before the core; only o_proj follows it (2 layers -> 2)
    assert (k["block"] == "attn_o_proj").sum() == 2
    assert (k["block"] == "attn_qkv_proj").sum() == 8
    # the grouped-GEMM experts kernels are in the experts block
    ex = " ".join(k[k["block"] == "moe_experts"]["name"])
    assert "grouped_gemm" in ex


def test_attention_block_shows_softmax_replaced_by_fused_kernel(eager_vs_sdpa):
    att = _block(eager_vs_sdpa, "attn_core")
    assert att.optimize and eager_vs_sdpa.top_block == "attn_core"  # largest |gap|
    assert att.b_us < att.a_us and att.b_count < att.a_count
    pair = next(m for m in att.matches if m.a_name and "softmax" in m.a_name)
    assert pair.b_name and "sdpa" in pair.b_name and "flash" in pair.b_name
    assert pair.kind == "category"  # softmax (attention) -> fused sdpa (attention)
    fusion = [a for a in att.annotations if a.kind == "FUSION"]
    assert fusion and fusion[0].side == "a"
    assert any("softmax" in k for k in fusion[0].kernels)
    assert any("nvjet" in k for k in fusion[0].kernels)  # the QK^T / PV GEMMs merge too
    missing = {(a.category, a.side) for a in att.annotations if a.kind == "MISSING"}
    assert ("gemm", "b") in missing  # no GEMM left in sdpa's attention core


def test_unchanged_blocks_align_kernel_for_kernel(eager_vs_sdpa):
    for name in ("attn_qkv_proj", "attn_o_proj", "mlp_down_proj", "rope"):
        b = _block(eager_vs_sdpa, name)
        assert b.a_count == b.b_count
        assert all(m.kind in ("same", "renamed") for m in b.matches)
        assert not [a for a in b.annotations if a.kind in ("FUSION", "MISSING")]


def test_totals_and_sort(eager_vs_sdpa):
    r = eager_vs_sdpa
    assert math.isclose(sum(b.a_us for b in r.blocks), r.total_a_us)
    assert math.isclose(sum(b.b_us for b in r.blocks), r.total_b_us)
    gaps = [abs(b.gap_us) for b in r.blocks]
    assert gaps == sorted(gaps, reverse=True)
    assert sum(b.optimize for b in r.blocks) == 1
    data = json.loads(r.model_dump_json())
    assert {"block", "a_us", "b_us", "gap_us", "ratio", "annotations"} <= set(data["blocks"][0])


def test_identical_runs_have_no_gap():
    r = diff_modules(EAGER, EAGER)
    assert r.a.label != r.b.label  # default labels made distinct
    assert all(b.gap_us == 0 and not b.annotations for b in r.blocks)
    assert r.top_block is None


def test_cross_model_missing_blocks():
    r = diff_modules(DSV3, SDPA, labels=["dsv3", "llama"])
    ex = _block(r, "moe_experts")
    assert ex.b_us == 0 and ex.b_count == 0
    assert {a.side for a in ex.annotations if a.kind == "MISSING"} == {"b"}
    assert all(m.kind == "gone" for m in ex.matches)


@pytest.mark.parametrize("layout", ["old", "new"])
def test_upstream_report_side_and_category_mismatches(tmp_path, layout):
    side = load_side(EAGER)
    k = side.kernels
    details = []
    # one detail sheet per decoder-layer instance, as upstream writes them (older layout)
    for layer in ("LlamaDecoderLayer_0",):
        sub = k[k["module_path"].str.contains(f"/{layer}/") | k["module_path"].str.endswith(f"/{layer}")]
        ks = [UKernel(p.split(f"{layer}/", 1)[-1] if f"{layer}/" in p else layer, n, float(d),
                      "elementwise" if c == "attention" else c, ts=float(t))
              for n, c, d, p, t in zip(sub["name"], sub["category"], sub["dur_us"], sub["module_path"], sub["ts_us"])]
        details.append(UDetail("LlamaDecoderLayer", layer, "prefill", "LlamaForCausalLM_0/LlamaModel_0", ks))
    rep = tmp_path / "up.xlsx"
    build_upstream_report(str(rep), UpstreamSpec(details=details, root_type="LlamaForCausalLM"), layout)
    r = diff_modules(rep, SDPA)
    assert r.a.kind == "upstream-report"
    assert any(w.code == "upstream_detail" for w in r.warnings)
    assert r.mismatches and {m.current for m in r.mismatches} == {"attention"}
    blocks = {b.block for b in r.blocks if b.a_us > 0}
    assert {"norm", "attn_core", "attn_qkv_proj", "attn_o_proj", "mlp_down_proj"} <= blocks
    # one layer on A (the representative detail sheet) against two on B
    att = _block(r, "attn_core")
    assert att.a_count * 2 == _block(diff_modules(EAGER, SDPA), "attn_core").a_count


def test_blocks_csv_errors_name_the_file(tmp_path):
    bad = tmp_path / "blocks.csv"
    bad.write_text("pattern,block,role\n(unclosed,attn,x\n")
    with pytest.raises(CategoriesError, match="blocks.csv.*bad regex"):
        diff_modules(EAGER, SDPA, blocks=bad)
    with pytest.raises(CategoriesError, match="header"):
        parse_blocks("regex,name\nx,y\n", source="b.csv")


def test_unknown_module_types_keep_their_name():
    rules = parse_blocks("pattern,block,role\nAttention$,attn_core,core\n")
    k = assign_blocks(load_side(EAGER).kernels, rules)
    assert "attn_core" in set(k["block"]) and "LlamaRMSNorm" in set(k["block"])


# --------------------------------------------------------------------------- faces


def test_mcp_tools_answer_with_output_schemas(tmp_path):
    import anyio
    from mcp import Client

    from mcp_server.faces.server import mcp

    async def go():
        async with Client(mcp) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            d = await c.call_tool("diff_modules", {"a": str(EAGER), "b": str(SDPA), "labels": ["eager", "sdpa"]})
            bu = await c.call_tool("budget", {"a": str(TRACES / "llama_decode_mixed.json.gz"),
                                              "b": str(TRACES / "llama_decode_graph.json.gz"), "phase": "decode"})
            bad = await c.call_tool("diff_modules", {"a": str(tmp_path / "missing.xlsx"), "b": str(SDPA)})
            return tools, d, bu, bad

    tools, d, bu, bad = anyio.run(go)
    from mcp_server.compare.requests import BudgetRequest, DiffModulesRequest

    # the schemas are the request models: every engine option (phase, categories, blocks, outputs) is there
    assert tools["diff_modules"].input_schema == DiffModulesRequest.model_json_schema()
    assert {"phase", "categories", "blocks", "output_xlsx", "output_html"} <= set(
        tools["diff_modules"].input_schema["properties"])
    assert tools["budget"].input_schema == BudgetRequest.model_json_schema()
    assert "categories" in tools["budget"].input_schema["properties"]
    assert "blocks" in tools["diff_modules"].output_schema["properties"]
    assert "rows" in tools["budget"].output_schema["properties"]
    assert tools["budget"].annotations.read_only_hint
    assert not d.is_error and d.structured_content["top_block"] == "attn_core"
    assert d.structured_content["blocks"][0]["annotations"]
    assert not bu.is_error and bu.structured_content["b"]["kernel_count"] == 399
    assert bad.is_error and "missing.xlsx" in bad.content[0].text and "Traceback" not in bad.content[0].text


def test_cli_compare_json_xlsx_html(tmp_path, capsys):
    from mcp_server.faces.cli import main

    rc = main(["compare", str(EAGER), str(SDPA), "--labels", "eager", "sdpa", "--json",
               "-o", str(tmp_path / "d.xlsx"), "--html", str(tmp_path / "d.html")])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["blocks"][0]["block"] == "attn_core" and data["blocks"][0]["optimize"]
    assert (tmp_path / "d.xlsx").exists() and (tmp_path / "d.html").exists()
    assert main(["budget", str(EAGER), str(SDPA), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {"category", "a_us", "b_us", "gap_us", "ratio"} <= set(rows[0])
    assert main(["compare", str(EAGER), str(tmp_path / "nope.xlsx")]) == 2
    assert "nope.xlsx" in capsys.readouterr().err
    assert main(["compare", str(EAGER), str(SDPA), "--panels", "1"]) == 0
    text = capsys.readouterr().out
    assert "attn_core" in text and "FUSION" in text


def test_communication_groups_and_generic_leaf_positions():
    """A hand-made SGLang-style layer: collectives form the communication block whatever their module;
    RowParallelLinear under the attention is o_proj; Linear after the MLP's own kernel is down_proj."""
    import pandas as pd

    from mcp_server.compare.inputs import side_from_frame
    from mcp_server.traces.models import KERNEL_COLUMNS

    L = "Model_0/Layer_0"
    rows = [
        ("rms", f"{L}/RMSNorm_0"), ("gemm_qkv", f"{L}/LlamaAttention_0/QKVParallelLinear_0"),
        ("rotary", f"{L}/LlamaAttention_0/RotaryEmbedding_0"), ("flash_fwd", f"{L}/LlamaAttention_0/RadixAttention_0"),
        ("gemm_o", f"{L}/LlamaAttention_0/RowParallelLinear_0"),
        ("ncclDevKernel_AllReduce_Sum", f"{L}/LlamaAttention_0/RowParallelLinear_0"),
        ("gemm_up", f"{L}/LlamaMLP_0/Linear_0"), ("silu_mul", f"{L}/LlamaMLP_0"), ("gemm_down", f"{L}/LlamaMLP_0/Linear_1"),
    ]
    recs = []
    for i, (name, path) in enumerate(rows):
        leaf = path.rsplit("/", 1)[-1]
        recs.append({c: "" for c in KERNEL_COLUMNS} | dict(
            name=name, category="", kind="kernel", ts_us=float(i), dur_us=1.0 + i, device=0, stream=0, correlation=i,
            module=leaf, module_type=leaf.rsplit("_", 1)[0], module_path=path, root_type="Model", graph=False,
            confidence=1.0, layer=-1, phase="prefill"))
    side = side_from_frame(pd.DataFrame(recs, columns=list(KERNEL_COLUMNS)), label="x")
    k = assign_blocks(side.kernels, load_blocks())
    got = dict(zip(k["name"], k["block"]))
    assert got["ncclDevKernel_AllReduce_Sum"] == "communication"
    assert got["gemm_qkv"] == "attn_qkv_proj" and got["gemm_o"] == "attn_o_proj"
    assert got["rotary"] == "rope" and got["flash_fwd"] == "attn_core"
    assert got["gemm_up"] == "mlp_gate_up_proj" and got["gemm_down"] == "mlp_down_proj"
    assert got["silu_mul"] == "mlp_act" and got["rms"] == "norm"


D = "DeepseekV2ForCausalLM/DeepseekV2Model/DeepseekV2DecoderLayer"
Q = "Qwen2ForCausalLM/Qwen2Model/Qwen2DecoderLayer"
M = "MixtralForCausalLM/MixtralModel/MixtralDecoderLayer"


@pytest.mark.parametrize("key,block", [
    # SGLang naming
    (f"{Q}/Qwen2Attention/QKVParallelLinear", "attn_qkv_proj"), (f"{Q}/Qwen2Attention/RowParallelLinear@pre", "attn_o_proj"),
    (f"{Q}/Qwen2Attention/RotaryEmbedding", "rope"), (f"{Q}/Qwen2Attention/RadixAttention", "attn_core"),
    (f"{Q}/Qwen2MLP/MergedColumnParallelLinear", "mlp_gate_up_proj"), (f"{Q}/Qwen2MLP/SiluAndMul", "mlp_act"),
    (f"{Q}/Qwen2MLP/RowParallelLinear@pre", "mlp_down_proj"), (f"{Q}/RMSNorm", "norm"),
    ("Qwen2ForCausalLM/Qwen2Model/VocabParallelEmbedding", "embedding"), ("Qwen2ForCausalLM/LogitsProcessor", "lm_head"),
    (f"{D}/DeepseekV2AttentionMLA/ReplicatedLinear@pre", "attn_qkv_proj"),
    (f"{D}/DeepseekV2AttentionMLA/ColumnParallelLinear@pre", "attn_qkv_proj"),
    (f"{D}/DeepseekV2AttentionMLA/RMSNorm", "attn_norm"), (f"{D}/DeepseekV2AttentionMLA/RowParallelLinear@post", "attn_o_proj"),
    (f"{D}/DeepseekV2AttentionMLA", "attn_core"), (f"{D}/DeepseekV2MoE/MoEGate", "moe_gate"),
    (f"{D}/DeepseekV2MoE/ReplicatedLinear@pre", "moe_gate"), (f"{D}/DeepseekV2MoE/TopK", "moe_topk"),
    (f"{D}/DeepseekV2MoE/FusedMoE", "moe_experts"), (f"{D}/DeepseekV2MoE/DeepEPMoE", "moe_experts"),
    (f"{D}/DeepseekV2MoE/DeepseekV2MLP/MergedColumnParallelLinear", "moe_shared_experts"),
    (f"{D}/DeepseekV2MoE", "moe_reduce"), (D, "residual"),
    ("Qwen2MoeForCausalLM/Qwen2MoeModel/Qwen2MoeDecoderLayer/Qwen2MoeSparseMoeBlock/Qwen2MoeMLP/MergedColumnParallelLinear",
     "moe_shared_experts"),
    # Hugging Face naming
    ("Qwen3ForCausalLM/Qwen3Model/Qwen3DecoderLayer/Qwen3Attention/Qwen3RMSNorm", "attn_norm"),
    (f"{M}/MixtralSparseMoeBlock/Linear@pre", "moe_gate"),
    (f"{M}/MixtralSparseMoeBlock/MixtralBlockSparseTop2MLP/Linear@pre", "moe_experts"),
    (f"{M}/MixtralSparseMoeBlock/MixtralExperts", "moe_experts"), (f"{M}/MixtralSparseMoeBlock", "moe_reduce"),
    (f"{M}/MixtralAttention/Linear@pre", "attn_qkv_proj"), (f"{M}/MixtralAttention/Linear@post", "attn_o_proj"),
    (f"{M}/MixtralRMSNorm", "norm"), ("LlamaForCausalLM/Linear@pre", "lm_head"),
])
def test_functional_blocks_cover_sglang_and_hf_naming(key, block):
    assert load_blocks().match(key, "?")[0] == block


def test_kernelscope_report_diffs_like_its_trace(tmp_path):
    from mcp_server.traces import analyze_trace

    rep = tmp_path / "eager.xlsx"
    analyze_trace(str(EAGER), output_xlsx=str(rep))
    from_report = diff_modules(rep, SDPA)
    from_trace = diff_modules(EAGER, SDPA)
    assert from_report.a.kind == "kernelscope-report"
    got = {b.block: (round(b.a_us, 3), b.a_count, [a.kind for a in b.annotations]) for b in from_report.blocks}
    want = {b.block: (round(b.a_us, 3), b.a_count, [a.kind for a in b.annotations]) for b in from_trace.blocks}
    assert got == want


def test_improve_compares_per_launch_time():
    # prefill (128 tokens) vs decode steps (1 token, eager + graph replays) of the same model:
    # the attention's copy kernels are slower per launch in prefill, though launched less often;
    # where both sides record input dims they differ (other work), so only the graph replays'
    # kernels (no dims recorded) can be judged per launch (issue 13).
    r = diff_modules(EAGER, TRACES / "llama_decode_mixed.json.gz", labels=["prefill", "decode"])
    att = _block(r, "attn_core")
    same_name_other_dims = [m for m in att.matches if m.kind == "same" and m.a_dims and m.b_dims
                            and m.a_dims != m.b_dims]
    assert same_name_other_dims  # aligned by name, shown with both shapes
    imp = [a for a in att.annotations if a.kind == "IMPROVE"]
    for m in same_name_other_dims:
        assert not any(a.kernels == [m.a_name, m.b_name] or a.kernels == [m.b_name, m.a_name] for a in imp)
    for a in imp:
        slow_side, fast_side = (att.a_kernels, att.b_kernels) if a.side == "a" else (att.b_kernels, att.a_kernels)
        s = next(k for k in slow_side if k.name == a.kernels[0])
        f = next(k for k in fast_side if k.name == a.kernels[1])
        assert s.category == f.category
        assert (s.us / s.count) >= 1.5 * (f.us / f.count)
    # no IMPROVE is raised from launch counts alone: eager vs sdpa have none
    assert not [a for b in diff_modules(EAGER, SDPA).blocks for a in b.annotations if a.kind == "IMPROVE"]


def test_graph_only_decode_side_attributed_through_a_reference_trace():
    """A graph-replay-only decode trace has no module spans; with an eager reference trace of the same
    model its kernels land in the same blocks as the mixed trace's replays."""
    from conftest import TRACES

    from mcp_server.compare.diff import diff_modules as diff

    graph, mixed = TRACES / "llama_decode_graph.json.gz", TRACES / "llama_decode_mixed.json.gz"
    bare = diff(graph, mixed, labels=["graph", "mixed"], phase="decode")
    assert bare.blocks[0].block == "graph replay, unattributed" and bare.blocks[0].a_us == pytest.approx(bare.a.total_us)
    res = diff(graph, mixed, labels=["graph", "mixed"], phase="decode", reference_a=mixed)
    blocks = {b.block: b for b in res.blocks}
    assert "graph replay, unattributed" not in blocks
    assert blocks["attn_core"].a_us > 0 and blocks["mlp_down_proj"].a_us > 0
    # the graph trace holds 3 replays and the mixed one an eager step plus the same 3 replays: 4 steps vs 3
    assert res.a.kernel_count == 399 and res.b.kernel_count > res.a.kernel_count
    w = [x for x in res.warnings if x.code == "step_count_differs"]
    assert w and "holds 3 step(s) and mixed 4" in w[0].message  # per step (issue 13): each side divided
    same = diff(TRACES / "llama_prefill_eager.json.gz", TRACES / "llama_prefill_sdpa.json.gz")
    assert not [x for x in same.warnings if x.code == "step_count_differs"]


def test_reference_trace_is_refused_for_a_report(tmp_path):
    import pytest as _pytest

    from mcp_server.compare.inputs import load_side
    from mcp_server.core.errors import InputError

    p = tmp_path / "r.xlsx"
    p.write_bytes(b"PK")
    with _pytest.raises(InputError, match="reference trace applies to trace inputs only"):
        load_side(p, reference=p)


def test_kernels_on_both_sides_pair_with_their_own_kind():
    """Decoder layer 0 of TraceLens's Qwen1.5-0.5B traces, H100 vs MI300X (excerpts cut by
    tools/make_field_excerpts.py): ROCm runs the same adds and copies through
    ``elementwise_kernel_manual_unroll``, so their names differ from CUDA's. Paired by category and
    closest time, the H100 add (69.4 us) took the MI300X copies (40.6 us) and the other way round, and
    the block claimed a FUSION of five kernels into four (issue 23)."""
    field = Path(__file__).parent / "fixtures" / "field"
    r = diff_modules(field / "qwen_layer0_h100.json.gz", field / "qwen_layer0_mi300.json.gz", labels=["h100", "mi300"])
    att = _block(r, "attn_core")

    def work(name):
        for w in ("CUDAFunctor_add", "direct_copy", "MulFunctor", "neg_kernel", "CatArray"):
            if name and w in name:
                return w
        return None
    paired = [(work(m.a_name), work(m.b_name), m.a_count, m.b_count) for m in att.matches
              if m.a_name and m.b_name and work(m.a_name)]
    assert {p[0] for p in paired} == {"CUDAFunctor_add", "direct_copy", "MulFunctor", "neg_kernel", "CatArray"}
    assert all(wa == wb and ca == cb for wa, wb, ca, cb in paired), paired
    # the add and copy kernels are the same work on both sides: no replacement segment holds them
    segs = {m.segment for m in att.matches if work(m.a_name) or work(m.b_name)}
    assert segs == {-1}
    # what is left to explain is the attention kernel itself (and MI300X's extra fill), never the adds
    fusion = [a for a in att.annotations if a.kind == "FUSION"]
    assert all(not any(work(k) for k in a.kernels) for a in fusion)
    # per launch the MI300X add is faster: an IMPROVE between the two adds, not between add and copy
    imp = [a for a in att.annotations if a.kind == "IMPROVE" and "CUDAFunctor_add" in a.kernels[0]]
    assert len(imp) == 1 and "CUDAFunctor_add" in imp[0].kernels[1]
