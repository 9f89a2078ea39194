"""Request models of the ledger operations (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from mcp_server.core.argbounds import NameArg, PathArg, PathList, TextArg
from mcp_server.core.operation import Request, SizedRequest, WritesOutputs

_LEDGER = Field(default=None, description=(
    "Ledger file (default: $KERNELSCOPE_LEDGER, else ./.kernelscope/ledger.db)"))


class _RecordRequest(WritesOutputs):
    """What every record_* operation takes: the ledger and an idempotency key."""

    ledger: Optional[PathArg] = _LEDGER
    key: Optional[NameArg] = Field(default=None, description=(
        "Idempotency key: recording again with the same key returns the first record instead of a new one"))


class RecordExperimentRequest(_RecordRequest):
    target: PathList = Field(min_length=1, description=(
        "The target's argument list, e.g. [\"python\", \"bench.py\", \"--size\", \"big\"] (CLI: after --)"))
    cwd: Optional[PathArg] = Field(default=None, description=(
        "The directory the target runs in (default the current one); its git state is recorded"))
    note: Optional[TextArg] = Field(default=None, description="A free note")


class RecordProfileRequest(_RecordRequest):
    experiment_id: int = Field(description="The experiment profiled (record_experiment's id, or from list_experiments)")
    report_path: Optional[PathArg] = Field(default=None, description=(
        "The ncu report (its sha256 is recorded); give it, classification, or both"))
    classification: Optional[Any] = Field(default=None, description=(
        "The classify_bottleneck / select_candidate result (or its per-kernel classes)"))
    note: Optional[TextArg] = Field(default=None, description="A free note")


class RecordCandidateRequest(_RecordRequest):
    experiment_id: int = Field(description="The experiment (record_experiment's id, or from list_experiments)")
    profile_id: Optional[int] = Field(default=None, description="The profile the candidate was chosen from")
    kernel: Optional[TextArg] = Field(default=None, description="The kernel chosen")
    diagnosis: Optional[TextArg] = Field(default=None, description="Its diagnosis (class, limiter, evidence)")
    proposal: Optional[TextArg] = Field(default=None, description=(
        "The proposal text from the agent or person (give it, proposal_id, or both)"))
    proposal_id: Optional[NameArg] = Field(default=None, description="A short name of the proposal")
    change_kind: Literal["file", "patch", "none"] = Field(default="none", description=(
        "file (a replacement file for change_target), patch (a git patch: a unified diff, kept in the ledger; "
        "over MCP inside the server's roots), none (the spec alone)"))
    change_path: Optional[PathArg] = Field(default=None, description="The replacement file or the patch file")
    change_target: Optional[PathArg] = Field(default=None, description=(
        "The file a file swap replaces, or the repository a patch applies to"))
    spec: Optional[Any] = Field(default=None, description=(
        "The candidate spec given to validate_candidate (its fields, or a spec path)"))


class RecordValidationRequest(_RecordRequest):
    candidate_id: int = Field(description="The candidate validated (record_candidate's id)")
    result: Optional[dict[str, Any]] = Field(default=None, description=(
        "The validate_candidate result JSON (or give result_path)"))
    result_path: Optional[PathArg] = Field(default=None, description=(
        "A file holding the validate_candidate result JSON (instead of result)"))


class RecordDecisionRequest(_RecordRequest):
    candidate_id: int = Field(description="The candidate decided (record_candidate's id)")
    decision: Literal["accepted", "reverted", "abandoned", "error"] = Field(description=(
        "accepted (needs an accepted validation), reverted (validated and rolled back), abandoned, "
        "error (the change could not be applied or its spec was refused)"))
    by: NameArg = Field(min_length=1, description="Who decided (agent, person, loop)")
    why: TextArg = Field(min_length=1, description="The reason in one line")


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
