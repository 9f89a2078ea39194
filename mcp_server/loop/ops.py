"""Operations of the loop engine, declared once (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from mcp_server.core.operation import EXECUTES_CODE, Operation
from mcp_server.loop.models import LoopResult
from mcp_server.loop.requests import LoopRequest

OPERATIONS = [
    Operation(
        tool="run_loop", verb="loop", title="Run the kernel-compass loop on a target",
        help="profile, classify, select, validate proposals, accept or revert; every step recorded in the ledger",
        description=(
            "The kernel-compass loop, unattended: profile the target with ncu (or read `profile`, an existing "
            "report), classify and select the candidate kernel, take the next proposal from the proposals file "
            "(each a validate_candidate spec plus a file swap or git patch), apply it, validate it, and accept "
            "it or restore the baseline (a rejected change never stays in place). Every step is recorded in the "
            "ledger; started again, it resumes the last experiment of the same target, finishes a candidate an "
            "interrupted run left pending, and never re-tries a rejected proposal. Stops after `iters` "
            "proposals, `max_rejects` rejects in a row, or when no proposal fits the candidate. The same steps "
            "are available one by one as run_ncu, select_candidate, validate_candidate and the record_* tools."),
        request=LoopRequest, result=LoopResult,
        engine="mcp_server.loop.engine:run_loop", render="mcp_server.loop.render:render_loop",
        hints=EXECUTES_CODE, remainder="target", progress=True, outputs={"ledger": "sqlite"},
    ),
]
