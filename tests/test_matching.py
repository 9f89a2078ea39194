"""Kernel-name normaliser and LCS alignment, on kernel names of the real H200 fixtures."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from mcp_server.compare.matching import Item, align, lcs_pairs, segments
from mcp_server.core.kernel_names import normalize_kernel_name

TRACES = Path(__file__).parent / "fixtures" / "traces"


def _kernel_names(stem: str) -> list[str]:
    with gzip.open(TRACES / f"{stem}.json.gz", "rt") as fh:
        ev = json.load(fh)["traceEvents"]
    return [e["name"] for e in ev if e.get("cat") == "kernel"]


@pytest.fixture(scope="module")
def names() -> dict[str, list[str]]:
    return {s: _kernel_names(s)
            for s in ("llama_prefill_eager", "llama_prefill_sdpa", "dsv3_prefill", "llama_decode_graph")}


def test_tile_and_arch_variants_of_one_gemm_normalise_together(names):
    nvjet = sorted({n for n in names["llama_prefill_eager"]
                    if n.startswith("nvjet_sm90_tst_") and n.endswith("_h_bz_TNT")})
    assert len(nvjet) >= 3  # several tile shapes of the same cuBLAS (nvjet) GEMM in the trace
    assert {normalize_kernel_name(n) for n in nvjet} == {"nvjet_tst_h_bz_tnt"}
    # the transpose layout is part of the work: NNT stays distinct
    nnt = next(n for n in names["llama_prefill_eager"] if n.endswith("_NNT"))
    assert normalize_kernel_name(nnt) != "nvjet_tst_h_bz_tnt"


def test_functor_of_elementwise_templates_is_kept(names):
    uniq = {normalize_kernel_name(n) for n in names["llama_prefill_eager"]}
    # add and mul run through the same at::native template but are different work
    assert "vectorized_elementwise[cudafunctor_add]" in uniq
    assert "vectorized_elementwise[mulfunctor]" in uniq
    assert "softmax_warp_forward" in uniq


def test_normaliser_collapses_but_keeps_distinct_work(names):
    raw = set(names["dsv3_prefill"])
    norm = {normalize_kernel_name(n) for n in raw}
    assert len(norm) < len(raw)
    assert len(norm) >= 0.5 * len(raw)  # no wholesale collapse
    assert all(norm)  # never empty


def test_generated_and_hashed_names():
    assert normalize_kernel_name("triton_poi_fused_add_mul_0") == normalize_kernel_name("triton_poi_fused_add_mul_17")
    assert normalize_kernel_name("ck_moe_stage1_7f3a9b2c1d") == "ck_moe_stage1"
    sdpa = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
    other_arch = sdpa.replace("sm90", "sm100").replace("knob_7", "knob_3")
    assert normalize_kernel_name(sdpa) == normalize_kernel_name(other_arch)
    cutlass = ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>"
               "(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)")
    assert normalize_kernel_name(cutlass) == "cutlass_simt_sgemm_nn"


def test_lcs_pairs_is_a_longest_common_subsequence():
    a = list("abcbdab")
    b = list("bdcaba")
    pairs = lcs_pairs(a, b)
    assert len(pairs) == 4
    assert all(a[i] == b[j] for i, j in pairs)
    assert [i for i, _ in pairs] == sorted(i for i, _ in pairs)
    assert [j for _, j in pairs] == sorted(j for _, j in pairs)


def test_align_pairs_replacements_by_category_then_time():
    a = [Item("rope", "rope", 5), Item("gemm_qk", "gemm", 10), Item("softmax", "attention", 6),
         Item("gemm_pv", "gemm", 9), Item("copy", "elementwise", 1)]
    b = [Item("rope", "rope", 5), Item("flash_fwd", "attention", 8), Item("memset", "memset", 1),
         Item("copy", "elementwise", 1)]
    pairs = align(a, b)
    kinds = {(p.a, p.b): p.kind for p in pairs}
    assert kinds[(0, 0)] == "same" and kinds[(4, 3)] == "same"
    assert kinds[(2, 1)] == "category"  # softmax -> flash (both attention)
    assert kinds[(1, 2)] == "time"  # largest leftover A with largest leftover B
    assert kinds[(3, None)] == "gone"
    segs = segments(pairs)
    assert list(segs.values()) == [([1, 2, 3], [1, 2])]
