"""The demo's comparison step (make demo): eager vs sdpa prefill on the bundled traces."""
from __future__ import annotations

from rich.console import Console

from mcp_server import demo


def test_demo_has_the_comparison_step():
    assert demo.step_compare in demo.STEPS
    assert demo.STEPS.index(demo.step_compare) > demo.STEPS.index(demo.step_analyze)


def test_demo_shows_softmax_path_replaced_by_fused_kernel():
    console = Console(record=True, width=200)
    demo.step_compare(console)
    text = console.export_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("attn_core:"))
    assert "softmax_warp_forward" in line and "cudnn_generated_fort_native_sdpa_flash" in line
    assert "40 -> 24 launches" in line  # two layers: 20 -> 12 attention-module kernels each
    assert "★" in text  # the attention block is the one marked for optimisation
