"""Reading the ledger: the engines of list_experiments, show_experiment and export_ledger (writing: record.py)."""
from __future__ import annotations

from typing import Any

from mcp_server.core.errors import redact
from mcp_server.core.operation import engine
from mcp_server.ledger.models import (
    CandidateRow,
    CandidateView,
    DecisionRow,
    ExperimentRow,
    ExperimentSummary,
    LedgerExportResult,
    LedgerListResult,
    LedgerShowResult,
    ProfileRow,
    ValidationRow,
)
from mcp_server.ledger.patches import patch_paths
from mcp_server.ledger.requests import LedgerExportRequest, LedgerListRequest, LedgerShowRequest
from mcp_server.ledger.store import Ledger

# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------

def validation_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The parts of a validate_candidate result a reader needs first."""
    corr = result.get("correctness") or {}
    timing = result.get("timing") or {}
    return {
        "verdict": result.get("verdict"), "accepted": result.get("accepted"),
        "reasons": result.get("reasons", []), "speedup": result.get("speedup"), "mode": result.get("mode"),
        "correctness": {"passed": corr.get("passed"), "max_abs_err": corr.get("max_abs_err"),
                        "max_rel_err": corr.get("max_rel_err"),
                        "failed": [c.get("name") for c in corr.get("checks", []) if isinstance(c, dict)
                                   and c.get("passed") is False]},
        "cache": timing.get("cache"), "samples": timing.get("samples"),
    }


def _summary(led: Ledger, exp: dict[str, Any]) -> ExperimentSummary:
    cands = led.candidates(exp["id"])
    counts = {"accepted": 0, "reverted": 0, "abandoned": 0, "error": 0, "pending": 0}
    for c in cands:
        counts[led.status(c["id"])] += 1
    last = led.query(
        "SELECT max(t) AS t FROM ("
        " SELECT created_at AS t FROM profiles WHERE experiment_id = ?1"
        " UNION ALL SELECT created_at FROM candidates WHERE experiment_id = ?1"
        " UNION ALL SELECT d.created_at FROM decisions d JOIN candidates c ON c.id = d.candidate_id"
        " WHERE c.experiment_id = ?1)", (exp["id"],))[0]["t"]
    return ExperimentSummary(
        id=exp["id"], created_at=exp["created_at"], target=exp["target"], git_rev=exp["git_rev"],
        git_dirty=None if exp["git_dirty"] is None else bool(exp["git_dirty"]), gpu=(exp["env"] or {}).get("gpu"),
        profiles=len(led.profiles(exp["id"])), candidates=len(cands), last_activity=last or exp["created_at"],
        **counts)


def _experiment_row(exp: dict[str, Any]) -> ExperimentRow:
    row = dict(exp)
    row["git_dirty"] = None if row["git_dirty"] is None else bool(row["git_dirty"])
    return ExperimentRow(**row)


def show(led: Ledger, experiment_id: int, *, full_results: bool = True) -> LedgerShowResult:
    exp = led.require("experiments", experiment_id, "id")
    views = []
    for c in led.candidates(experiment_id):
        vals = []
        for v in led.validations(c["id"]):  # fresh dicts (Ledger.query decodes each row anew)
            v["accepted"] = bool(v["accepted"])
            if not full_results:
                v["result"] = validation_summary(v["result"])
            vals.append(ValidationRow(**v))
        if c.get("change_text") and patch_paths(c["change_text"]) is None:
            c = {**c, "change_text": None}  # an older ledger may hold a file that is no patch: never shown
        views.append(CandidateView(candidate=CandidateRow(**c), status=led.status(c["id"]), validations=vals,
                                   decisions=[DecisionRow(**d) for d in led.decisions(c["id"])]))
    return LedgerShowResult(ledger=str(led.path), summary=_summary(led, exp), experiment=_experiment_row(exp),
                            profiles=[ProfileRow(**p) for p in led.profiles(experiment_id)], candidates=views)


@engine(LedgerListRequest)
def ledger_list(req: LedgerListRequest) -> LedgerListResult:
    """The experiments of a ledger, newest first, with their candidates' outcomes counted."""
    with Ledger.open(req.ledger, create=False) as led:
        exps = [e for e in reversed(led.experiments())
                if not req.target_contains or req.target_contains in " ".join(e["target"])]
        return LedgerListResult(ledger=str(led.path), schema_version=led.schema_version,
                                experiments=[_summary(led, e) for e in exps], total=len(exps))


@engine(LedgerShowRequest)
def ledger_show(req: LedgerShowRequest) -> LedgerShowResult:
    """One experiment with its profiles, candidates, validations and decisions."""
    with Ledger.open(req.ledger, create=False) as led:
        return show(led, req.id, full_results=req.full_results)


@engine(LedgerExportRequest)
def ledger_export(req: LedgerExportRequest) -> LedgerExportResult:
    """The ledger as JSON, or as the markdown experiment log; written atomically to ``output`` if given."""
    from mcp_server.core.atomic import atomic_write_text
    from mcp_server.ledger.export import to_json, to_markdown

    with Ledger.open(req.ledger, create=False) as led:
        ids = [req.experiment_id] if req.experiment_id is not None else [e["id"] for e in led.experiments()]
        shows = [show(led, i, full_results=True) for i in ids]
        text = to_markdown(str(led.path), shows) if req.format == "md" else to_json(str(led.path),
                                                                                     led.schema_version, shows)
        path = str(led.path)
    text = redact(text)  # a token a candidate printed (its error text) never reaches an export
    if req.output:
        atomic_write_text(req.output, text, what="ledger export")
        return LedgerExportResult(ledger=path, format=req.format, output=str(req.output), experiments=len(shows))
    return LedgerExportResult(ledger=path, format=req.format, experiments=len(shows), text=text)
