"""The ledger operations: ledger_record, ledger_list, ledger_show, ledger_export.

Also the typed helpers the loop writes through (``record_*``), so the loop and an
agent calling ``ledger_record`` produce the same records.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from mcp_server.core import limits
from mcp_server.core.atomic import check_confined
from mcp_server.core.errors import FileMissingError, LedgerError, redact
from mcp_server.core.operation import engine
from mcp_server.ledger import env as envmod
from mcp_server.ledger.models import (
    CandidateRow,
    CandidateView,
    DecisionRow,
    ExperimentRow,
    ExperimentSummary,
    LedgerExportResult,
    LedgerListResult,
    LedgerRecordResult,
    LedgerShowResult,
    ProfileRow,
    ValidationRow,
)
from mcp_server.ledger.patches import patch_paths
from mcp_server.ledger.requests import REQUIRED_BY_KIND, LedgerExportRequest, LedgerListRequest, LedgerShowRequest
from mcp_server.ledger.store import DECISIONS, Ledger

#: Patches up to this size are kept in the ledger itself (change_text).
MAX_CHANGE_TEXT = 256 * 1024


# ---------------------------------------------------------------------------
# Typed writers (one committed transaction each)
# ---------------------------------------------------------------------------

def _regular_file(value: str, field: str, what: str, *, confined: bool = True) -> Path:
    """``value`` as a readable regular file (over MCP inside the roots, when ``confined``): never a FIFO or a
    device, which hashing would read forever."""
    import stat

    p = Path(value).expanduser()
    if confined:
        check_confined(p, field)
    try:
        st = p.stat()
    except OSError:
        raise FileMissingError(f"{what} not found ({field})", path=p) from None
    if not stat.S_ISREG(st.st_mode):
        raise LedgerError(f"{field} is not a regular file", path=p)
    return p


def record_experiment(led: Ledger, target: list[str], *, cwd: Optional[str] = None, note: Optional[str] = None,
                      key: Optional[str] = None, environment: Optional[dict[str, Any]] = None) -> tuple[int, bool]:
    if not target:
        raise LedgerError("target is required for an experiment (the target's argument list)", path=led.path)
    if key is not None:
        hit = led.by_key("experiments", key)
        if hit is not None:  # skip the (slow) environment probe on a resume
            return int(hit["id"]), False
    run_dir = str(Path(cwd or os.getcwd()).resolve())
    repo_dir = envmod.target_repo_dir(list(target), run_dir)
    git = envmod.git_state(repo_dir)
    return led.insert("experiments", {  # argv as recorded: tokens redacted (the key hashes the real argv)
        "key": key, "target_key": envmod.target_key(list(target), repo_dir), "target": [redact(a) for a in target],
        "cwd": run_dir, "repo": git["repo"], "git_rev": git["git_rev"],
        "git_dirty": None if git["git_dirty"] is None else int(git["git_dirty"]),
        "env": environment if environment is not None else envmod.environment(), "note": note,
    })


def record_profile(led: Ledger, experiment_id: Optional[int], *, report_path: Optional[str] = None,
                   classification: Any = None, note: Optional[str] = None,
                   key: Optional[str] = None) -> tuple[int, bool]:
    led.require("experiments", experiment_id, "experiment_id")
    sha = None
    if report_path:
        p = _regular_file(report_path, "report_path", "ncu report", confined=False)  # read as its format
        sha = envmod.sha256_file(p)
        report_path = str(p.resolve())
    elif classification is None:
        raise LedgerError("a profile needs report_path or classification", path=led.path)
    return led.insert("profiles", {"experiment_id": experiment_id, "key": key, "report_path": report_path,
                                   "report_sha256": sha, "classification": classification, "note": note})


def record_candidate(led: Ledger, experiment_id: Optional[int], *, profile_id: Optional[int] = None,
                     kernel: Optional[str] = None, diagnosis: Optional[str] = None, proposal: Optional[str] = None,
                     proposal_id: Optional[str] = None, change_kind: str = "none",
                     change_path: Optional[str] = None, change_target: Optional[str] = None,
                     spec: Any = None, fingerprint: Optional[str] = None, base_sha256: Optional[str] = None,
                     key: Optional[str] = None) -> tuple[int, bool]:
    led.require("experiments", experiment_id, "experiment_id")
    if profile_id is not None:
        prof = led.require("profiles", profile_id, "profile_id")
        if prof["experiment_id"] != experiment_id:
            raise LedgerError(f"profile_id={profile_id} belongs to experiment {prof['experiment_id']}, "
                              f"not {experiment_id}", path=led.path)
    if not (proposal or proposal_id):
        raise LedgerError("a candidate needs proposal (the text) or proposal_id", path=led.path)
    sha = text = None
    if change_kind in ("file", "patch"):
        if not change_path:
            raise LedgerError(f"change_kind={change_kind} needs change_path", path=led.path)
        p = _regular_file(change_path, "change_path", "change file")
        if change_kind == "patch":
            text = _patch_text(p)
        sha = envmod.sha256_file(p)
        change_path = str(p.resolve())
        if change_kind == "file" and change_target and base_sha256 is None:
            check_confined(Path(change_target), "change_target")
            if Path(change_target).is_file():
                base_sha256 = envmod.sha256_file(_regular_file(change_target, "change_target", "change target"))
    return led.insert("candidates", {
        "experiment_id": experiment_id, "profile_id": profile_id, "key": key, "proposal_id": proposal_id,
        "fingerprint": fingerprint, "kernel": kernel, "diagnosis": diagnosis, "proposal": proposal,
        "change_kind": change_kind, "change_path": change_path, "change_target": change_target,
        "change_sha256": sha, "base_sha256": base_sha256, "change_text": text, "spec": spec})


def _patch_text(p: Path) -> Optional[str]:
    """A patch's text, kept in the ledger (up to MAX_CHANGE_TEXT): refused, without a word of it, when the file
    is not a unified diff."""
    size = p.stat().st_size
    with open(p, "rb") as fh:
        head = fh.read(min(size, MAX_CHANGE_TEXT)).decode("utf-8", errors="replace")
    if patch_paths(head) is None:
        raise LedgerError("change_path is not a patch (no unified diff: a ---/+++ header with a hunk, or a "
                          "'diff --git' line)", path=p, hint="give the file `git diff` wrote, or change_kind=file")
    return head if size <= MAX_CHANGE_TEXT else None


def record_validation(led: Ledger, candidate_id: Optional[int], result: Any,
                      *, key: Optional[str] = None) -> tuple[int, bool]:
    led.require("candidates", candidate_id, "candidate_id")
    if hasattr(result, "model_dump"):
        result = result.model_dump(mode="json")
    limits.check_nesting(result, "result")
    if not isinstance(result, dict) or not isinstance(result.get("accepted"), bool) \
            or not isinstance(result.get("verdict"), str):
        raise LedgerError("result is not a validate_candidate result (needs boolean 'accepted' and "
                          "string 'verdict')", path=led.path, hint="pass the tool's whole JSON result")
    return led.insert("validations", {"candidate_id": candidate_id, "key": key, "verdict": result["verdict"],
                                      "accepted": int(result["accepted"]), "result": result})


def record_decision(led: Ledger, candidate_id: Optional[int], decision: Optional[str], *, by: Optional[str],
                    why: Optional[str], key: Optional[str] = None) -> tuple[int, bool]:
    led.require("candidates", candidate_id, "candidate_id")
    if decision not in DECISIONS:
        raise LedgerError("decision must be accepted, reverted, abandoned or error", path=led.path)
    if not by or not why:
        raise LedgerError("a decision needs by (who decided) and why (one line)", path=led.path)
    hit = led.by_key("decisions", key) if key is not None else None
    if hit is not None:
        return int(hit["id"]), False
    if decision == "accepted":
        vals = led.validations(int(candidate_id))  # type: ignore[arg-type]
        if not vals or not vals[-1]["accepted"]:
            raise LedgerError(f"candidate {candidate_id} has no accepted validation: a change is accepted only "
                              "on a validate_candidate result that accepts it", path=led.path,
                              hint="record the validation first, or decide reverted/abandoned")
    return led.insert("decisions", {"candidate_id": candidate_id, "key": key, "decision": decision,
                                    "by": by, "why": why})


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
        for v in led.validations(c["id"]):
            v = dict(v)
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


# ---------------------------------------------------------------------------
# Operations (engine functions of ops.py)
# ---------------------------------------------------------------------------

def ledger_record(ledger: Optional[str] = None, kind: str = "experiment", key: Optional[str] = None,
                  experiment_id: Optional[int] = None, candidate_id: Optional[int] = None,
                  profile_id: Optional[int] = None, target: Optional[list[str]] = None, cwd: Optional[str] = None,
                  note: Optional[str] = None, report_path: Optional[str] = None, classification: Any = None,
                  kernel: Optional[str] = None, diagnosis: Optional[str] = None, proposal: Optional[str] = None,
                  proposal_id: Optional[str] = None, change_kind: str = "none", change_path: Optional[str] = None,
                  change_target: Optional[str] = None, spec: Any = None, result: Optional[dict[str, Any]] = None,
                  result_path: Optional[str] = None, decision: Optional[str] = None, by: Optional[str] = None,
                  why: Optional[str] = None) -> LedgerRecordResult:
    """Write one record of the experiment log (one committed transaction)."""
    given = {"experiment_id": experiment_id, "candidate_id": candidate_id, "decision": decision}
    missing = [f for f in REQUIRED_BY_KIND.get(kind, ()) if given[f] is None]
    if missing:
        raise LedgerError(f"{' and '.join(missing)} is required for a record of kind={kind}",
                          hint="`kernelscope ledger list` / `ledger show ID` give the ids")
    for name, value in (("classification", classification), ("spec", spec), ("result", result)):
        limits.check_nesting(value, name)
    with Ledger.open(ledger) as led:
        cand_id: Optional[int] = None
        if kind == "experiment":
            rid, created = record_experiment(led, list(target or []), cwd=cwd, note=note, key=key)
            exp_id = rid
        elif kind == "profile":
            rid, created = record_profile(led, experiment_id, report_path=report_path,
                                          classification=classification, note=note, key=key)
            exp_id = int(experiment_id)  # type: ignore[arg-type]
        elif kind == "candidate":
            rid, created = record_candidate(
                led, experiment_id, profile_id=profile_id, kernel=kernel, diagnosis=diagnosis, proposal=proposal,
                proposal_id=proposal_id, change_kind=change_kind, change_path=change_path,
                change_target=change_target, spec=spec, key=key)
            exp_id, cand_id = int(experiment_id), rid  # type: ignore[arg-type]
        elif kind == "validation":
            if result is None and result_path:
                p = _regular_file(result_path, "result_path", "validation result file")
                if p.stat().st_size > limits.limit("TEXT_FILE_BYTES"):
                    raise limits.over("TEXT_FILE_BYTES", "result_path", path=p)
                try:
                    loaded = limits.loads_json(p.read_text(encoding="utf-8"), "result_path", path=p)
                except (ValueError, UnicodeDecodeError) as exc:
                    raise LedgerError(f"result_path is not JSON ({exc})", path=p) from None
                if not isinstance(loaded, dict):
                    raise LedgerError("result_path holds no JSON object (a validate_candidate result)", path=p)
                result = loaded
            if result is None:
                raise LedgerError("a validation needs result (or result_path)", path=led.path)
            rid, created = record_validation(led, candidate_id, result, key=key)
            cand_id = candidate_id
            exp_id = int(led.get("candidates", int(candidate_id))["experiment_id"])  # type: ignore[index,arg-type]
        elif kind == "decision":
            rid, created = record_decision(led, candidate_id, decision, by=by, why=why, key=key)
            cand_id = candidate_id
            exp_id = int(led.get("candidates", int(candidate_id))["experiment_id"])  # type: ignore[index,arg-type]
        else:
            raise LedgerError(f"kind={kind!r}: expected experiment, profile, candidate, validation or decision",
                              path=led.path)
        return LedgerRecordResult(ledger=str(led.path), kind=kind, id=rid, experiment_id=exp_id,
                                  candidate_id=cand_id, created=created)


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
