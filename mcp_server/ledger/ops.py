"""Operations of the ledger engine, declared once (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from mcp_server.core.operation import READ_ONLY, WRITES_FILES, Hints, Operation
from mcp_server.ledger.models import LedgerExportResult, LedgerListResult, LedgerRecordResult, LedgerShowResult
from mcp_server.ledger.requests import (
    LedgerExportRequest,
    LedgerListRequest,
    LedgerRecordRequest,
    LedgerShowRequest,
)

_R = "mcp_server.ledger.render:"
_E = "mcp_server.ledger.engine:"

OPERATIONS = [
    Operation(
        tool="ledger_record", verb="ledger record", title="Record a step of the kernel-compass loop",
        help="record an experiment, profile, candidate, validation or decision in the experiment ledger",
        description=(
            "Write one record of the experiment ledger (SQLite, ./.kernelscope/ledger.db by default): "
            "experiment (target argv; git revision, dirty flag and GPU/driver/torch/triton/ncu versions are "
            "recorded), profile (ncu report path + sha256 and its classification), candidate (kernel, diagnosis, "
            "proposal text, the file or patch of the change and its hash), validation (the whole "
            "validate_candidate result), decision (accepted only on an accepted validation; reverted; abandoned; "
            "by whom and why). Returns the record id; give `key` to make a retry return the same record."),
        request=LedgerRecordRequest, result=LedgerRecordResult,
        engine=_E + "ledger_record", render=_R + "render_record",
        hints=Hints(read_only=False, idempotent=False), outputs={"ledger": "sqlite"},
    ),
    Operation(
        tool="ledger_list", verb="ledger list", title="List the experiments of the ledger",
        help="list the experiments of the ledger with their accepted/reverted/pending counts",
        description=(
            "The experiments recorded in the ledger, newest first: target, git revision, GPU, and how many "
            "candidates were accepted, reverted, abandoned, or are pending (a loop stopped before deciding). "
            "Use it to resume: a pending candidate or an open experiment is where the loop continues."),
        request=LedgerListRequest, result=LedgerListResult,
        engine=_E + "ledger_list", render=_R + "render_list", hints=READ_ONLY,
    ),
    Operation(
        tool="ledger_show", verb="ledger show", title="Show one experiment of the ledger",
        help="show one experiment: its profiles, candidates, validations and decisions",
        description=(
            "One experiment with every record in order: profiles (report, hash, classification), candidates "
            "(kernel, diagnosis, proposal, change), validations (verdict, speedup interval, correctness; the "
            "full result with full_results=true) and decisions (who, why)."),
        request=LedgerShowRequest, result=LedgerShowResult,
        engine=_E + "ledger_show", render=_R + "render_show", hints=READ_ONLY, positional=("id",),
    ),
    Operation(
        tool="ledger_export", verb="ledger export", title="Export the ledger (markdown log or JSON)",
        help="export the ledger as the markdown experiment log or as JSON",
        description=(
            "The whole ledger (or one experiment) as the markdown experiment log a person reads (format=md) "
            "or as JSON with every record and full validation results (format=json), written atomically to "
            "`output` or returned as text."),
        request=LedgerExportRequest, result=LedgerExportResult,
        engine=_E + "ledger_export", render=_R + "render_export", hints=WRITES_FILES, outputs={"output": "md-or-json"},
    ),
]
