"""Issue 13: categories on real traces: MoE routing kernels in moe, RMSNorm kernels in normalization."""
from __future__ import annotations

from pathlib import Path

import pytest

from mcp_server.core.categories import load_categories
from mcp_server.core.vocab import RESERVED_CATEGORIES
from mcp_server.traces import analyze_trace

TR = Path(__file__).parent / "fixtures" / "traces"


@pytest.fixture(scope="module")
def dsv3():
    return analyze_trace(str(TR / "dsv3_prefill.json.gz"))


def test_moe_routing_kernels_are_moe(dsv3):
    """gatherTopK / sortKVInPlace (router top-k, expert sort) and the experts' grouped GEMM were
    elementwise / gemm, leaving moe at 2.9 us (the grouped-GEMM data preparation only)."""
    k = dsv3.kernels
    moe = k[k["category"] == "moe"]
    names = " ".join(moe["name"])
    for part in ("gatherTopK", "radixSortKVInPlace", "bitonicSortKVInPlace", "prepare_grouped_gemm_data",
                 "GroupProblemShape"):
        assert part in names
    assert moe["dur_us"].sum() > 60.0
    # every moe kernel runs inside the MoE module (router or experts): none leaks from elsewhere
    assert moe["module_path"].str.contains("DeepseekV3MoE_0").all()
    ew = k[k["category"] == "elementwise"]
    assert not ew["name"].str.contains("TopK|SortKV", regex=True).any()


def test_rmsnorm_kernels_are_normalization(dsv3):
    """Eager RMSNorm is pow / mean / add / rsqrt / mul: the rsqrt kernel (the one a fused Triton
    RMSNorm also names) is normalization, one per RMSNorm call."""
    k = dsv3.kernels
    norm = k[k["category"] == "normalization"]
    assert len(norm) == int((k.groupby("module_path")["module_type"].first() == "DeepseekV3RMSNorm").sum())
    assert (norm["module_type"] == "DeepseekV3RMSNorm").all()
    assert norm["cpu_op"].eq("aten::rsqrt").all()
    llama = analyze_trace(str(TR / "llama_prefill_eager.json.gz")).kernels
    ln = llama[llama["category"] == "normalization"]
    assert len(ln) == 5 and (ln["module_type"] == "LlamaRMSNorm").all()


def test_shared_categories_keep_reserved_names():
    rules = load_categories(None)
    cats = {r.category for r in rules.rules} if hasattr(rules, "rules") else set()
    assert set(RESERVED_CATEGORIES) <= cats
    assert {"moe", "normalization"} <= cats
    assert rules.classify("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0") == "normalization"
    assert rules.classify("fused_add_rmsnorm_kernel") == "normalization"
