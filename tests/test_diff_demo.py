"""The demo's comparison step (make demo): eager vs sdpa prefill on the bundled traces."""
from __future__ import annotations

from rich.console import Console

from mcp_server.faces import demo


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


def test_skill_frontmatter_names_registered_tools():
    """skills/compare-kernels/SKILL.md: Agent Skills frontmatter whose MCP tools exist on the server."""
    import re
    from pathlib import Path

    import anyio
    from mcp import Client

    from mcp_server.faces.server import mcp

    text = (Path(__file__).resolve().parent.parent / "skills" / "compare-kernels" / "SKILL.md").read_text()
    assert text.startswith("---\n")
    front = text.split("---\n", 2)[1]
    keys = {m.group(1) for m in re.finditer(r"^([a-z-]+):", front, re.M)}
    assert {"name", "description", "license", "compatibility", "metadata", "allowed-tools"} <= keys
    assert re.search(r"^name: compare-kernels$", front, re.M)
    wanted = set(re.findall(r"mcp__kernelscope__([a-z_]+)", front))
    assert {"recategorize", "diff_modules", "budget", "find_references"} <= wanted
    assert "Bash(kernelscope:*)" in front

    async def names():
        async with Client(mcp) as c:
            return {t.name for t in (await c.list_tools()).tools}

    assert wanted <= anyio.run(names)
    assert "(references/find-references.md)" in text and (
        Path(__file__).resolve().parent.parent / "skills" / "compare-kernels" / "references" / "find-references.md").exists()
