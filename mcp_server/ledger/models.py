"""Result models of the ledger operations (the MCP tools' output and the CLI's ``--json``)."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from mcp_server.core.models import Model, Warning_

RecordKind = Literal["experiment", "profile", "candidate", "validation", "decision"]
Decision = Literal["accepted", "reverted", "abandoned", "error"]
ChangeKind = Literal["file", "patch", "none"]
Status = Literal["pending", "accepted", "reverted", "abandoned", "error"]
ExportFormat = Literal["json", "md"]


class ExperimentRow(Model):
    id: int
    created_at: str
    target: list[str] = Field(description="the target's argument list")
    cwd: Optional[str] = None
    repo: Optional[str] = Field(None, description="top of the git work tree the target lives in")
    git_rev: Optional[str] = None
    git_dirty: Optional[bool] = Field(None, description="tracked files had uncommitted changes when it started")
    env: dict[str, Any] = Field(default_factory=dict, description="GPU, driver, python/torch/triton/ncu versions")
    note: Optional[str] = None
    key: Optional[str] = None
    target_key: str = Field(description="names the target across experiments (argv + directory)")


class ProfileRow(Model):
    id: int
    experiment_id: int
    created_at: str
    report_path: Optional[str] = None
    report_sha256: Optional[str] = None
    classification: Optional[Any] = Field(None, description="the classification recorded with it (per-kernel classes)")
    note: Optional[str] = None
    key: Optional[str] = None


class CandidateRow(Model):
    id: int
    experiment_id: int
    profile_id: Optional[int] = None
    created_at: str
    proposal_id: Optional[str] = None
    fingerprint: Optional[str] = Field(
        None, description="hash of the proposal (id, spec, change): the loop's no-retry key")
    kernel: Optional[str] = None
    diagnosis: Optional[str] = None
    proposal: Optional[str] = Field(None, description="the proposal text from the agent or person")
    change_kind: ChangeKind = "none"
    change_path: Optional[str] = Field(None, description="the replacement file or the patch")
    change_target: Optional[str] = Field(
        None, description="the file a file swap replaces, or the repo a patch applies to")
    change_sha256: Optional[str] = None
    base_sha256: Optional[str] = Field(None, description="hash of the file the swap replaced (file changes)")
    change_text: Optional[str] = Field(None, description="the patch text (patch changes up to 256 KiB)")
    spec: Optional[Any] = Field(None, description="the candidate spec given to validate_candidate")
    key: Optional[str] = None


class ValidationRow(Model):
    id: int
    candidate_id: int
    created_at: str
    verdict: str
    accepted: bool
    result: Any = Field(description="the validate_candidate result (a summary unless full results were asked for)")
    key: Optional[str] = None


class DecisionRow(Model):
    id: int
    candidate_id: int
    created_at: str
    decision: Decision
    by: str
    why: str
    key: Optional[str] = None


class CandidateView(Model):
    candidate: CandidateRow
    status: Status = Field(description="the latest decision, or pending")
    validations: list[ValidationRow] = Field(default_factory=list)
    decisions: list[DecisionRow] = Field(default_factory=list)


class ExperimentSummary(Model):
    id: int
    created_at: str
    target: list[str]
    git_rev: Optional[str] = None
    git_dirty: Optional[bool] = None
    gpu: Optional[Any] = None
    profiles: int = 0
    candidates: int = 0
    accepted: int = 0
    reverted: int = 0
    abandoned: int = 0
    error: int = Field(0, description="candidates whose change could not be applied or whose spec was refused")
    pending: int = Field(0, description="candidates without a decision (a loop stopped mid-way)")
    last_activity: Optional[str] = None


class LedgerRecordResult(Model):
    """One record written (or found again by its key)."""

    ledger: str = Field(description="the ledger file")
    kind: RecordKind
    id: int = Field(description="the record's id within its kind")
    experiment_id: int
    candidate_id: Optional[int] = None
    created: bool = Field(description="false when a record with the same key already existed (nothing written)")
    warnings: list[Warning_] = Field(default_factory=list)


class LedgerListResult(Model):
    """The experiments in a ledger, newest first."""

    ledger: str
    schema_version: int
    experiments: list[ExperimentSummary]
    total: int
    warnings: list[Warning_] = Field(default_factory=list)


class LedgerShowResult(Model):
    """One experiment with every record, in order."""

    ledger: str
    summary: ExperimentSummary
    experiment: ExperimentRow
    profiles: list[ProfileRow]
    candidates: list[CandidateView]
    warnings: list[Warning_] = Field(default_factory=list)


class LedgerExportResult(Model):
    """The ledger exported as JSON or as the markdown experiment log."""

    ledger: str
    format: ExportFormat
    output: Optional[str] = Field(None, description="the file written; null when the text is returned instead")
    experiments: int
    text: Optional[str] = Field(None, description="the export itself when no output path was given")
    warnings: list[Warning_] = Field(default_factory=list)
