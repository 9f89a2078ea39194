"""Issue 13: the text faces read at 80 columns (a pipe) and use the room at 200 (snapshot-style)."""
from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from mcp_server.compare.budget import budget
from mcp_server.compare.diff import diff_modules
from mcp_server.compare.render import render_budget, render_diff

TR = Path(__file__).parent / "fixtures" / "traces"
EAGER, SDPA = TR / "llama_prefill_eager.json.gz", TR / "llama_prefill_sdpa.json.gz"
GRAPH, MIXED = TR / "llama_decode_graph.json.gz", TR / "llama_decode_mixed.json.gz"


class _Req:
    def __init__(self, width=None, top_n=6):
        self.width, self.top_n = width, top_n


def _text(render, res, width, console_width=None) -> str:
    buf = io.StringIO()
    # the CLI sets the console to --width; the renderers lay out for the console they are given
    con = Console(file=buf, width=console_width or width or 80, color_system=None, highlight=False)
    render(res, con, _Req(width))
    return buf.getvalue()


@pytest.fixture(scope="module")
def eager_sdpa():
    return diff_modules(str(EAGER), str(SDPA), labels=["eager", "sdpa"])


# The blocks table at 80 columns, as a person piping `kernelscope compare` sees it.
BLOCKS_80 = """\
   block              A us   B us  gap B-A    B/A  notes
────────────────────────────────────────────────────────
★  attn_core          89.5   56.2    -33.3  0.63x  FM
   LlamaModel         22.9   11.6    -11.2  0.51x  F
   norm               71.2   70.1     -1.2  0.98x
   attn_o_proj         6.7    6.5     -0.2  0.97x
   mlp_down_proj       9.2    9.1     -0.1  0.99x
   mlp_gate_up_proj   12.8   12.7     -0.1  0.99x
   attn_qkv_proj      17.4   17.5     +0.1  1.01x
   lm_head             4.0    4.0     +0.1  1.02x
   embedding           1.3    1.3     +0.1  1.05x
   rope               13.4   13.4     -0.1  1.00x
   residual            4.2    4.2     +0.0  1.00x
   mlp_act             5.7    5.7     +0.0  1.00x

   total             258.2  212.3    -45.9  0.82x"""


def test_compare_at_80_columns(eager_sdpa):
    out = _text(render_diff, eager_sdpa, 80)
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= 80
    got = "\n".join(x.rstrip() for x in lines)
    assert BLOCKS_80 in got  # block names whole, the role column dropped, one line per block
    # panels: one pair per row with launch counts, the mask add's dims, the FUSION note
    assert "★ attn_core: A 89.5 us ×40 | B 56.2 us ×24" in got
    assert "[[1,8,128,128],[1,1,128,128]]" in got
    assert "4.7 ×2" in got and "FUSION eager runs" in got


def test_compare_at_200_columns_and_width_option(eager_sdpa):
    wide = _text(render_diff, eager_sdpa, 200)  # --width 200 on an 80-column console
    lines = wide.splitlines()
    assert max(len(x) for x in lines) <= 200 and max(len(x) for x in lines) > 120
    assert "role" in wide and "launches A/B" in wide and "attention core (softmax(QK^T)V)" in wide
    assert "eager kernel" in wide and "sdpa kernel" in wide and "input dims (A | B)" in wide  # side by side
    assert any("attn_core" in x and "40/24" in x and "FUSION, MISSING" in x for x in lines)


def test_warnings_come_before_the_tables():
    r = diff_modules(str(GRAPH), str(MIXED), reference_a=str(TR / "llama_prefill_sdpa.json.gz"))
    out = _text(render_diff, r, 80)
    flat = "".join(out.split())  # wrapping at 80 columns depends on where the checkout's paths end
    assert flat.index("isaprefilltrace") < flat.index("Blocks(sorted")
    # the reference and its confidence are shown with the side
    head = flat[: flat.index("warning")]
    assert "reference" in head and "llama_prefill_sdpa.json.gz" in head and "confidence0.79" in head
    assert "SUSPECT" in head
    assert max(len(x) for x in out.splitlines()) <= 80
    b = budget(str(GRAPH), str(MIXED), phase="decode")
    bo = _text(render_budget, b, 80)
    bflat = "".join(bo.split())
    assert bflat.index("3step(s)and") < bflat.index("Budgetbycategory")
    assert max(len(x) for x in bo.splitlines()) <= 80


def test_analyze_text_face_at_80_and_200():
    from mcp_server.traces import analyze_trace
    from mcp_server.traces.render import render_analysis

    res = analyze_trace(str(TR / "dsv3_prefill.json.gz"))
    narrow = _text(render_analysis, res, None)
    assert max(len(x) for x in narrow.splitlines()) <= 80
    # module names whole (they were cut to 'DeepseekV3TopkRout…' / 'DeepseekV3RotaryEmb…')
    for name in ("DeepseekV3TopkRouter", "DeepseekV3RotaryEmbedding", "DeepseekV3DecoderLayer_1",
                 "DeepseekV3RotaryEmbedding_0"):
        assert re.search(rf"(^|\s){name}\s", narrow, re.M), name
    assert "…" not in narrow and "┃" not in narrow  # nothing cut, no side borders to crop
    wide = _text(render_analysis, res, 200, console_width=200)
    assert "Top kernel" in wide and "Top category" in wide and "Phase" in wide
    assert max(len(x) for x in wide.splitlines()) <= 200
    graph = analyze_trace(str(GRAPH))
    out = _text(render_analysis, graph, None)
    assert out.index("warning") < out.index("Categories")


def test_timeline_text_faces_at_80_and_200():
    from mcp_server.timeline.analysis import analyze_timeline
    from mcp_server.timeline.compare import compare_timelines
    from mcp_server.timeline.render import render_analysis, render_comparison

    tl = Path(__file__).parent / "fixtures" / "timeline"
    res = analyze_timeline(str(tl / "imbalanced_probe.bin"), str(tl / "phases.events"))
    narrow = _text(render_analysis, res, None)
    assert max(len(x) for x in narrow.splitlines()) <= 80
    row = next(x for x in narrow.splitlines() if x.strip().startswith("compute"))
    assert "3.73x" in row and "5, 37, 90" in row  # outliers only: block 15, 11 are ordinary
    red = next(x for x in narrow.splitlines() if x.strip().startswith("reduce"))
    assert red.rstrip().endswith("17")
    assert "…" not in narrow.split("Verdicts")[0]
    wide = _text(render_analysis, res, 200, console_width=200)
    assert "last blocks" in wide and "CV" in wide
    cmp = compare_timelines(str(tl / "balanced_probe.bin"), str(tl / "imbalanced_probe.bin"), str(tl / "phases.events"))
    out = _text(render_comparison, cmp, None)
    assert max(len(x) for x in out.splitlines()) <= 80
    assert "133.5 us -> 515.2 us" in out and "1.00x -> 3.73x" in out
