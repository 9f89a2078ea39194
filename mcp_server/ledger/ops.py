"""Operations of the ledger engine, declared once (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from mcp_server.core.operation import READ_ONLY, WRITES_FILES, Hints, Operation, Request
from mcp_server.ledger.models import LedgerExportResult, LedgerListResult, LedgerRecordResult, LedgerShowResult
from mcp_server.ledger.requests import (
    LedgerExportRequest,
    LedgerListRequest,
    LedgerShowRequest,
    RecordCandidateRequest,
    RecordDecisionRequest,
    RecordExperimentRequest,
    RecordProfileRequest,
    RecordValidationRequest,
)

_R = "mcp_server.ledger.render:"
_E = "mcp_server.ledger.engine:"


def _record(kind: str, request: type[Request], holds: str, remainder: str | None = None) -> Operation:
    """``record_<kind>`` / ``kernelscope ledger record <kind>``: one tool per kind of record, each taking only what
    that record holds (docs/ledger.md says why this is not one tool switched by a ``kind`` argument)."""
    a = "an" if kind[0] in "aeiou" else "a"
    return Operation(
        tool=f"record_{kind}", verb=f"ledger record {kind}", title=f"Record {a} {kind} in the experiment ledger",
        help=f"record {a} {kind} in the experiment ledger",
        description=(f"Write one {kind} record to the experiment ledger (SQLite, ./.kernelscope/ledger.db by "
                     f"default): {holds}. Returns the record id; give `key` to make a retry return the same record."),
        request=request, result=LedgerRecordResult, engine=f"mcp_server.ledger.record:record_{kind}",
        render=_R + "render_record", hints=Hints(read_only=False, idempotent=False), outputs={"ledger": "sqlite"},
        remainder=remainder)


OPERATIONS = [
    _record("experiment", RecordExperimentRequest, (
        "a target (its argument list); the git revision and dirty flag of its repository and the GPU, driver, "
        "python, torch, triton and ncu versions are recorded with it. Every other record hangs off an experiment"),
        remainder="target"),
    _record("profile", RecordProfileRequest, (
        "an ncu report of an experiment (path and sha256) and its classification (the classify_bottleneck or "
        "select_candidate result)")),
    _record("candidate", RecordCandidateRequest, (
        "a proposed change for an experiment, recorded before it is applied: the kernel, its diagnosis, the "
        "proposal text, the replacement file or git patch (hashed; a patch kept whole), the validate_candidate "
        "spec")),
    _record("validation", RecordValidationRequest, (
        "a candidate's whole validate_candidate result (verdict, correctness, speedup interval, timing)")),
    _record("decision", RecordDecisionRequest, (
        "what became of a candidate: accepted (refused unless its latest validation accepted it), reverted, "
        "abandoned or error, by whom and why")),
    Operation(
        tool="list_experiments", verb="ledger list", title="List the experiments of the ledger",
        help="list the experiments of the ledger with their accepted/reverted/pending counts",
        description=(
            "The experiments recorded in the ledger, newest first: target, git revision, GPU, and how many "
            "candidates were accepted, reverted, abandoned, or are pending (a loop stopped before deciding). "
            "Use it to resume: a pending candidate or an open experiment is where the loop continues."),
        request=LedgerListRequest, result=LedgerListResult,
        engine=_E + "ledger_list", render=_R + "render_list", hints=READ_ONLY,
    ),
    Operation(
        tool="show_experiment", verb="ledger show", title="Show one experiment of the ledger",
        help="show one experiment: its profiles, candidates, validations and decisions",
        description=(
            "One experiment with every record in order: profiles (report, hash, classification), candidates "
            "(kernel, diagnosis, proposal, change), validations (verdict, speedup interval, correctness; the "
            "full result with full_results=true) and decisions (who, why)."),
        request=LedgerShowRequest, result=LedgerShowResult,
        engine=_E + "ledger_show", render=_R + "render_show", hints=READ_ONLY, positional=("id",),
    ),
    Operation(
        tool="export_ledger", verb="ledger export", title="Export the ledger (markdown log or JSON)",
        help="export the ledger as the markdown experiment log or as JSON",
        description=(
            "The whole ledger (or one experiment) as the markdown experiment log a person reads (format=md) "
            "or as JSON with every record and full validation results (format=json), written atomically to "
            "`output` or returned as text."),
        request=LedgerExportRequest, result=LedgerExportResult,
        engine=_E + "ledger_export", render=_R + "render_export", hints=WRITES_FILES, outputs={"output": "md-or-json"},
    ),
]
