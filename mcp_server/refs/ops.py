"""Operations of the refs engine, declared once (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from mcp_server.core.operation import OPEN_WORLD_READ, Operation
from mcp_server.refs.models import ReferenceResult
from mcp_server.refs.requests import FindReferencesRequest

OPERATIONS = [
    Operation(
        tool="find_references", verb="refs", title="Find prior art for a kernel/op",
        help="find prior art for a kernel/op keyword: upstream PRs, local checkouts, Jira",
        description=(
            "Has someone already done this? Search upstream PRs (ROCm/aiter, sgl-project/sglang via gh or the GitHub "
            "REST API), local git checkouts (AITER_ROOT, SGLANG_ROOT, detected) and Jira for a kernel or op keyword, "
            "concurrently within a time bound. Sources come from data-sources.md. Each section says how it "
            "was obtained (live:gh, live:rest, live:jira, local:git, url-only) and why when degraded; `outcomes` "
            "reads as upstream_pr -> cherry-pick, local_hit -> dispatch/wiring, jira_ticket -> coordinate, "
            "nothing_found -> new work, unknown -> inconclusive."),
        request=FindReferencesRequest, result=ReferenceResult,
        engine="mcp_server.refs.finder:find_references", render="mcp_server.refs.render:render_references",
        hints=OPEN_WORLD_READ, positional=("keyword",),
        aliases={"max_results": ("--max",), "timeout_s": ("--timeout",)},
    ),
]
