"""Issue 13: compare-kernels findings that hold on the real H200 traces (tests/fixtures/traces)."""
from __future__ import annotations

from pathlib import Path

import pytest

from mcp_server.compare.diff import diff_modules

TR = Path(__file__).parent / "fixtures" / "traces"
EAGER, SDPA = TR / "llama_prefill_eager.json.gz", TR / "llama_prefill_sdpa.json.gz"


@pytest.fixture(scope="module")
def eager_sdpa():
    return diff_modules(str(EAGER), str(SDPA), labels=["eager", "sdpa"])


def _block(r, name):
    return next(b for b in r.blocks if b.block == name)


def test_rope_adds_match_and_the_mask_add_is_fused_away(eager_sdpa):
    """The two cudafunctor_add kernels of the rope (q and k) run in both; eager's third add is the
    attention-mask add on [1,8,128,128] that sdpa fuses into its attention kernel. Matched on name
    alone, all adds became one 'same' row (14.2 vs 9.6 us, 1.49x): one step from an IMPROVE."""
    att = _block(eager_sdpa, "attn_core")
    adds = [m for m in att.matches if "CUDAFunctor_add" in (m.a_name or m.b_name or "")]
    same = [m for m in adds if m.kind == "same"]
    assert len(same) == 2
    for m in same:
        assert m.a_dims == m.b_dims and m.a_count == m.b_count == 2
        assert abs(m.a_us - m.b_us) <= 0.05 * m.a_us
    mask = [m for m in adds if m.kind == "gone"]
    assert len(mask) == 1 and mask[0].a_dims == "[[1,8,128,128],[1,1,128,128],[]]"
    fusion = [a for a in att.annotations if a.kind == "FUSION" and a.side == "a"]
    assert fusion and mask[0].a_name in fusion[0].kernels
    assert not [a for a in att.annotations if a.kind == "IMPROVE"]
    # the panels carry counts and dims
    rows = [k for k in att.a_kernels if k.name == mask[0].a_name]
    assert {k.input_dims for k in rows} >= {"[[1,8,128,128],[1,1,128,128],[]]"} and all(k.cpu_op == "aten::add"
                                                                                         for k in rows)
