"""Writing the ledger: one operation per kind of record (record_experiment, record_profile, record_candidate,
record_validation, record_decision), each taking only what that record holds.

The operations and the loop write through the same typed writers (``add_*``, one committed transaction
each), so the loop and an agent calling the tools produce the same records.
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
from mcp_server.ledger.models import LedgerRecordResult, RecordKind
from mcp_server.ledger.patches import patch_paths
from mcp_server.ledger.requests import (
    RecordCandidateRequest,
    RecordDecisionRequest,
    RecordExperimentRequest,
    RecordProfileRequest,
    RecordValidationRequest,
)
from mcp_server.ledger.store import DECISIONS, Ledger

#: Patches up to this size are kept in the ledger itself (change_text).
MAX_CHANGE_TEXT = 256 * 1024


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


def add_experiment(led: Ledger, target: list[str], *, cwd: Optional[str] = None, note: Optional[str] = None,
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


def add_profile(led: Ledger, experiment_id: int, *, report_path: Optional[str] = None,
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


def add_candidate(led: Ledger, experiment_id: int, *, profile_id: Optional[int] = None,
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


def add_validation(led: Ledger, candidate_id: int, result: Any,
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


def add_decision(led: Ledger, candidate_id: int, decision: str, *, by: str,
                 why: str, key: Optional[str] = None) -> tuple[int, bool]:
    led.require("candidates", candidate_id, "candidate_id")
    if decision not in DECISIONS:
        raise LedgerError("decision must be accepted, reverted, abandoned or error", path=led.path)
    if not by or not why:
        raise LedgerError("a decision needs by (who decided) and why (one line)", path=led.path)
    hit = led.by_key("decisions", key) if key is not None else None
    if hit is not None:
        return int(hit["id"]), False
    if decision == "accepted":
        vals = led.validations(candidate_id)
        if not vals or not vals[-1]["accepted"]:
            raise LedgerError(f"candidate {candidate_id} has no accepted validation: a change is accepted only "
                              "on a validate_candidate result that accepts it", path=led.path,
                              hint="record the validation first, or decide reverted/abandoned")
    return led.insert("decisions", {"candidate_id": candidate_id, "key": key, "decision": decision,
                                    "by": by, "why": why})


# ---------------------------------------------------------------------------
# Operations (engine functions of ops.py)
# ---------------------------------------------------------------------------

def _recorded(led: Ledger, kind: RecordKind, rid: int, created: bool, *, experiment_id: int,
              candidate_id: Optional[int] = None) -> LedgerRecordResult:
    return LedgerRecordResult(ledger=str(led.path), kind=kind, id=rid, experiment_id=experiment_id,
                              candidate_id=candidate_id, created=created)


def _experiment_of(led: Ledger, candidate_id: int) -> int:
    return int(led.require("candidates", candidate_id, "candidate_id")["experiment_id"])


@engine(RecordExperimentRequest)
def record_experiment(req: RecordExperimentRequest) -> LedgerRecordResult:
    """An experiment: the target, its directory's git state and the environment."""
    with Ledger.open(req.ledger) as led:
        rid, created = add_experiment(led, list(req.target), cwd=req.cwd, note=req.note, key=req.key)
        return _recorded(led, "experiment", rid, created, experiment_id=rid)


@engine(RecordProfileRequest)
def record_profile(req: RecordProfileRequest) -> LedgerRecordResult:
    """A profile of an experiment: the ncu report (path and sha256) and its classification."""
    limits.check_nesting(req.classification, "classification")
    with Ledger.open(req.ledger) as led:
        rid, created = add_profile(led, req.experiment_id, report_path=req.report_path,
                                   classification=req.classification, note=req.note, key=req.key)
        return _recorded(led, "profile", rid, created, experiment_id=req.experiment_id)


@engine(RecordCandidateRequest)
def record_candidate(req: RecordCandidateRequest) -> LedgerRecordResult:
    """A candidate: the kernel, its diagnosis, the proposal and its change (hashed; a patch kept whole)."""
    limits.check_nesting(req.spec, "spec")
    with Ledger.open(req.ledger) as led:
        rid, created = add_candidate(
            led, req.experiment_id, profile_id=req.profile_id, kernel=req.kernel, diagnosis=req.diagnosis,
            proposal=req.proposal, proposal_id=req.proposal_id, change_kind=req.change_kind,
            change_path=req.change_path, change_target=req.change_target, spec=req.spec, key=req.key)
        return _recorded(led, "candidate", rid, created, experiment_id=req.experiment_id, candidate_id=rid)


@engine(RecordValidationRequest)
def record_validation(req: RecordValidationRequest) -> LedgerRecordResult:
    """A validation: the whole validate_candidate result, given as JSON or in a file."""
    limits.check_nesting(req.result, "result")
    with Ledger.open(req.ledger) as led:
        result = req.result if req.result is not None or not req.result_path else _result_file(req.result_path)
        if result is None:
            raise LedgerError("a validation needs result (or result_path)", path=led.path)
        rid, created = add_validation(led, req.candidate_id, result, key=req.key)
        return _recorded(led, "validation", rid, created, experiment_id=_experiment_of(led, req.candidate_id),
                         candidate_id=req.candidate_id)


def _result_file(result_path: str) -> dict[str, Any]:
    """The validate_candidate result a file holds (bounded, JSON, an object)."""
    p = _regular_file(result_path, "result_path", "validation result file")
    if p.stat().st_size > limits.limit("TEXT_FILE_BYTES"):
        raise limits.over("TEXT_FILE_BYTES", "result_path", path=p)
    try:
        loaded = limits.loads_json(p.read_text(encoding="utf-8"), "result_path", path=p)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LedgerError(f"result_path is not JSON ({exc})", path=p) from None
    if not isinstance(loaded, dict):
        raise LedgerError("result_path holds no JSON object (a validate_candidate result)", path=p)
    return loaded


@engine(RecordDecisionRequest)
def record_decision(req: RecordDecisionRequest) -> LedgerRecordResult:
    """A decision on a candidate: accepted (only on an accepted validation), reverted, abandoned or error."""
    with Ledger.open(req.ledger) as led:
        rid, created = add_decision(led, req.candidate_id, req.decision, by=req.by, why=req.why, key=req.key)
        return _recorded(led, "decision", rid, created, experiment_id=_experiment_of(led, req.candidate_id),
                         candidate_id=req.candidate_id)
