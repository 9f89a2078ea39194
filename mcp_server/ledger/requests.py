"""Request models of the ledger operations (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from mcp_server.core.argbounds import NameArg, PathArg, PathList, TextArg
from mcp_server.core.operation import Request, SizedRequest, WritesOutputs

_LEDGER = Field(default=None, description=(
    "Ledger file (default: $KERNELSCOPE_LEDGER, else ./.kernelscope/ledger.db)"))


#: The fields each ``kind`` of record needs besides ``kind`` (the engine refuses a record without them;
#: tests/test_skills.py checks every ledger_record example in the skills against it).
REQUIRED_BY_KIND: dict[str, tuple[str, ...]] = {
    "experiment": (),
    "profile": ("experiment_id",),
    "candidate": ("experiment_id",),
    "validation": ("candidate_id",),
    "decision": ("candidate_id", "decision"),
}


class LedgerRecordRequest(WritesOutputs):
    ledger: Optional[PathArg] = _LEDGER
    kind: Literal["experiment", "profile", "candidate", "validation", "decision"] = Field(description=(
        "What to record: experiment (a target), profile (an ncu report and its classification, needs "
        "experiment_id), candidate (a proposed change, needs experiment_id), validation (a validate_candidate "
        "result, needs candidate_id), decision (accepted / reverted / abandoned, needs candidate_id)"))
    key: Optional[NameArg] = Field(default=None, description=(
        "Idempotency key: recording again with the same key returns the first record instead of a new one"))
    experiment_id: Optional[int] = Field(default=None, description="The experiment (profile, candidate)")
    candidate_id: Optional[int] = Field(default=None, description="The candidate (validation, decision)")
    profile_id: Optional[int] = Field(default=None, description="The profile the candidate was chosen from (candidate)")
    target: Optional[PathList] = Field(default=None, description=(
        "experiment: the target's argument list, e.g. [\"python\", \"bench.py\", \"--size\", \"big\"]"))
    cwd: Optional[PathArg] = Field(default=None, description=(
        "experiment: the directory the target runs in (default the current one); its git state is recorded"))
    note: Optional[TextArg] = Field(default=None, description="experiment / profile: a free note")
    report_path: Optional[PathArg] = Field(default=None, description="profile: the ncu report (its sha256 is recorded)")
    classification: Optional[Any] = Field(default=None, description=(
        "profile: the classify_bottleneck / select_candidate result (or its per-kernel classes)"))
    kernel: Optional[TextArg] = Field(default=None, description="candidate: the kernel chosen")
    diagnosis: Optional[TextArg] = Field(default=None, description=(
        "candidate: its diagnosis (class, limiter, evidence)"))
    proposal: Optional[TextArg] = Field(default=None, description=(
        "candidate: the proposal text from the agent or person"))
    proposal_id: Optional[NameArg] = Field(default=None, description="candidate: a short name of the proposal")
    change_kind: Literal["file", "patch", "none"] = Field(default="none", description=(
        "candidate: file (a replacement file for change_target), patch (a git patch: a unified diff, kept in the "
        "ledger; over MCP inside the server's roots), none (the spec alone)"))
    change_path: Optional[PathArg] = Field(default=None, description=(
        "candidate: the replacement file or the patch file"))
    change_target: Optional[PathArg] = Field(default=None, description=(
        "candidate: the file a file swap replaces, or the repository a patch applies to"))
    spec: Optional[Any] = Field(default=None, description=(
        "candidate: the candidate spec given to validate_candidate (its fields, or a spec path)"))
    result: Optional[dict[str, Any]] = Field(default=None, description="validation: the validate_candidate result JSON")
    result_path: Optional[PathArg] = Field(default=None, description=(
        "validation: a file holding the validate_candidate result JSON (instead of result)"))
    decision: Optional[Literal["accepted", "reverted", "abandoned", "error"]] = Field(default=None, description=(
        "decision: accepted (needs an accepted validation), reverted (validated and rolled back), abandoned, "
        "error (the change could not be applied or its spec was refused)"))
    by: Optional[NameArg] = Field(default=None, description="decision: who decided (agent, person, loop)")
    why: Optional[TextArg] = Field(default=None, description="decision: the reason in one line")


class LedgerListRequest(SizedRequest):
    ledger: Optional[PathArg] = _LEDGER
    target_contains: Optional[PathArg] = Field(default=None, description=(
        "Only experiments whose target argument list contains this text"))


class LedgerShowRequest(Request):
    id: int = Field(description="Experiment id (from ledger list)")
    ledger: Optional[PathArg] = _LEDGER
    full_results: bool = Field(default=False, description=(
        "Include each validation's full result JSON (default: verdict, speedup, correctness summary)"))


class LedgerExportRequest(WritesOutputs):
    ledger: Optional[PathArg] = _LEDGER
    format: Literal["json", "md"] = Field(default="md", description=(
        "md: the experiment log a person reads; json: every record with full validation results"))
    output: Optional[PathArg] = Field(default=None, description="File to write (atomic); default: return the text")
    experiment_id: Optional[int] = Field(default=None, description="Export only this experiment")
