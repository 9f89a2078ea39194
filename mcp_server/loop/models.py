"""Result model of the loop (the MCP tool's output and the CLI's ``--json``)."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from mcp_server.core.models import Model, Warning_

StopReason = Literal["iters_done", "no_proposals", "proposals_exhausted", "max_rejects", "no_candidate"]


def speedup_text(sp: Any) -> str:
    """``1.234x [1.200, 1.270]`` from validate_candidate's speedup (its JSON dict); empty without a median."""
    if not isinstance(sp, dict) or not isinstance(sp.get("median"), (int, float)):
        return ""
    s = f"{sp['median']:.3f}x"
    if isinstance(sp.get("ci_low"), (int, float)) and isinstance(sp.get("ci_high"), (int, float)):
        s += f" [{sp['ci_low']:.3f}, {sp['ci_high']:.3f}]"
    return s


class LoopStep(Model):
    """One proposal tried (validated and decided) in this run."""

    proposal_id: str
    candidate_id: int
    kernel: Optional[str] = None
    verdict: Optional[str] = Field(None, description="validate_candidate's verdict (null when it could not run)")
    decision: Literal["accepted", "reverted", "abandoned", "error"] = Field(description=(
        "error: the change could not be applied (refused before anything was written, or a patch that no "
        "longer applies) or validate_candidate refused the spec; nothing of it stays in place"))
    why: str
    speedup: Optional[dict[str, Any]] = Field(None, description="median and confidence interval of the speedup")
    resumed: bool = Field(False, description="this candidate was pending from an interrupted run and was finished now")


class LoopSkip(Model):
    """A proposal not tried in this run, and why."""

    proposal_id: str
    reason: str
    candidate_id: Optional[int] = Field(None, description="the earlier candidate that settles it, when there is one")


class LoopResult(Model):
    """What one run of the loop did; the ledger holds every record of it."""

    ledger: str
    experiment_id: int
    resumed: bool = Field(description="continued an experiment already in the ledger")
    profile_id: Optional[int] = Field(None, description="the last profile used")
    report: Optional[str] = Field(None, description="the ncu report of the last profile")
    candidate: Optional[str] = Field(None, description="the kernel select_candidate chose last")
    diagnosis: Optional[str] = None
    steps: list[LoopStep] = Field(default_factory=list)
    skipped: list[LoopSkip] = Field(default_factory=list)
    accepted: int = 0
    rejected: int = Field(0, description="reverted or abandoned in this run")
    errors: int = Field(0, description="proposals that ended in an error in this run (not applied, spec refused)")
    stopped: StopReason
    stop_message: str
    warnings: list[Warning_] = Field(default_factory=list)

    def exit_code(self) -> int:
        """The CLI's exit status: 0 when this run accepted a change, else 3 (it completed, nothing accepted)."""
        from mcp_server.core.vocab import ExitCode

        return ExitCode.ok if self.accepted else ExitCode.not_accepted
