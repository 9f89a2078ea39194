"""The loop engine: profile → classify → select → propose → validate → accept or revert, recorded.

Crash safety comes from the order of the writes and from keys:

1. the candidate is recorded (with the hash of the file it changes) *before* the change is
   applied;
2. the change is applied, validated, and the validation recorded;
3. rejected: the baseline is restored *before* the ``reverted`` decision is recorded;
   accepted: the ``accepted`` decision is recorded, then the backup dropped.

Every record carries a key derived from the experiment and the proposal's fingerprint,
so a run started again after a ``kill -9`` finds its pending candidate, puts the tree
right (from the hashes), reuses a validation already recorded, and writes each missing
record exactly once. Proposals that an earlier run (of any experiment on the same
target) rejected or abandoned are skipped.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from mcp_server.core.errors import ChangeConflictError, FileMissingError, InputError, KernelscopeError
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.core.replay_dir import repro_target
from mcp_server.core.vocab import ProgressFn, WarningCode
from mcp_server.ledger import record as rec
from mcp_server.ledger.env import sha256_file, target_key, target_repo_dir, target_repository
from mcp_server.ledger.store import Ledger
from mcp_server.loop.changes import AppliedChange
from mcp_server.loop.models import LoopResult, LoopSkip, LoopStep, StopReason, speedup_text
from mcp_server.loop.proposals import Proposal, load_proposals
from mcp_server.loop.requests import LoopRequest
from mcp_server.loop.steps import LoopSteps, Selection, default_steps


def _why(result: dict[str, Any]) -> str:
    """validate_candidate's first reason (it states the interval and the threshold), else verdict + speedup."""
    reasons = result.get("reasons") or []
    if reasons:
        return f"{result.get('verdict')}: {reasons[0]}"
    sp = speedup_text(result.get("speedup"))
    return f"{result.get('verdict')}" + (f": speedup {sp}" if sp else "")


class _Run:
    """One run of the loop over one experiment: its state (done, rejects in a row, proposals tried) and steps."""

    def __init__(self, led: Ledger, req: LoopRequest, target: list[str], steps: LoopSteps,
                 progress: Optional[ProgressFn]):
        self.led = led
        self.target = target
        self.steps = steps
        self.by = req.by
        self.cache_control = req.cache_control
        self.progress = progress
        self.iters = req.iters
        self.max_rejects = req.max_rejects
        self.tkey = target_key(target, target_repo_dir(target))
        self.exp_id = 0
        self.done = 0
        self.rejects = 0  # rejected in a row (an error does not count, an accepted change resets it)
        self.tried: set[str] = set()
        self.pid: Optional[int] = None
        self.report: Optional[Path] = None
        self.sel: Optional[Selection] = None
        self.warnings: list[Warning_] = []
        self.steps_out: list[LoopStep] = []
        self.skipped: list[LoopSkip] = []
        self._selections: dict[int, Selection] = {}

    def tell(self, message: str) -> None:
        if self.progress is not None:
            self.progress(self.done, self.iters, message)

    def warn(self, code: str, message: str) -> None:
        if not any(w.code == code for w in self.warnings):
            self.warnings.append(Warning_(code=code, message=message))

    def count(self, step: LoopStep) -> None:
        """A proposal validated and decided (or ended in an error) in this run."""
        self.done += 1
        self.tried.add(step.proposal_id)
        if step.decision != "error":
            self.rejects = 0 if step.decision == "accepted" else self.rejects + 1
        self.tell(f"{step.proposal_id}: {step.decision}")

    # -- the experiment --------------------------------------------------------------------
    def open_experiment(self, fresh: bool) -> bool:
        """Resume the last experiment of this target (unless ``fresh``) or record a new one; True when resumed."""
        same = self.led.query("SELECT * FROM experiments WHERE target_key = ? ORDER BY id", (self.tkey,))
        if same and not fresh:
            self.exp_id = int(same[-1]["id"])
            return True
        self.exp_id, created = rec.add_experiment(self.led, self.target, key=f"loop:{self.tkey}:{len(same) + 1}")
        return not created

    def finish_pending(self) -> None:
        """A candidate left pending by an interrupted run is finished first."""
        for c in self.led.candidates(self.exp_id):
            if self.led.status(c["id"]) == "pending" and self.done < self.iters:
                self.count(self.finish(c, resumed=True))

    def iterate(self, props: list[Proposal], given: Optional[Path]) -> tuple[StopReason, str]:
        """Profile, select, take the next fitting proposal and finish it, until a stop; the stop and its message."""
        while True:
            if self.done >= self.iters:
                return "iters_done", f"validated {self.iters} proposal(s)"
            if self.rejects >= self.max_rejects:
                return "max_rejects", f"{self.rejects} proposals rejected in a row (max_rejects={self.max_rejects})"
            self.pid, self.report, sel = self.current_profile(self.exp_id, given)
            self.sel = sel
            if sel.kernel is None:
                return "no_candidate", f"select_candidate chose no kernel: {sel.stop_reason}"
            if not props:
                return "no_proposals", (f"no proposals given: write [[proposal]] entries (each a validate_candidate "
                                        f"spec) for {sel.short_name or sel.kernel} and run again with proposals")
            chosen = self.choose(props, sel)
            if chosen is None:
                return "proposals_exhausted", f"no untried proposal fits the candidate {sel.kernel}"
            cid, _ = _record_candidate(self.led, self.exp_id, self.pid, sel, chosen)
            self.count(self.finish(self.led.get("candidates", cid) or {}, resumed=False))

    def choose(self, props: list[Proposal], sel: Selection) -> Optional[Proposal]:
        """The next proposal to validate for the selected kernel. On the way, proposals settled in an earlier run
        are skipped, a change refused before anything is applied is recorded as an error, and one the
        classification advises against is recorded as abandoned (unless it says ``force``)."""
        led, exp_id, pid = self.led, self.exp_id, self.pid
        settled = _settled(led, self.tkey)
        for p in sorted(props, key=lambda q: (not (q.kernel and q.matches(sel.kernel, sel.short_name)), q.index)):
            if p.id in self.tried or any(s.proposal_id == p.id for s in self.skipped):
                continue
            st, cid = settled.get(p.fingerprint, ("pending", 0))
            if st != "pending":  # decided in an earlier run
                self.skipped.append(LoopSkip(proposal_id=p.id, candidate_id=cid, reason=(
                    f"already {_settled_word(st)} (candidate {cid}); edit the proposal or give it a new id to try "
                    "again")))
                continue
            if not p.matches(sel.kernel, sel.short_name):
                continue
            if p.change.problem is not None:  # refused before anything is applied: an error, then the next
                with led.write():
                    cid, _ = _record_candidate(led, exp_id, pid, sel, p)
                    self.error(led.get("candidates", cid) or {"id": cid, "proposal_id": p.id, "kernel": sel.kernel},
                               f"not applied: {p.change.problem}", False)
                self.tried.add(p.id)
                continue
            avoid = _advised_against(p, sel)
            if avoid and not p.force:
                why = (f"not tried: the classification of {sel.short_name or sel.kernel} advises against "
                       f"{avoid} (set force = true to validate it anyway)")
                with led.write():  # candidate and decision together: never a pending one to validate
                    cid, _ = _record_candidate(led, exp_id, pid, sel, p)
                    rec.add_decision(led, cid, "abandoned", by=self.by, why=why, key=f"c{cid}:decision")
                self.skipped.append(LoopSkip(proposal_id=p.id, candidate_id=cid, reason=why))
                continue
            if avoid:
                self.warn(WarningCode.forced_proposal, f"{p.id}: validated although the classification of "
                          f"{sel.short_name or sel.kernel} advises against {avoid}")
            return p
        return None

    def skip_unreached(self, props: list[Proposal], stopped: str) -> None:
        """Say why each proposal this run never reached was not: settled earlier, for another kernel, or the stop."""
        handled = self.tried | {s.proposal_id for s in self.skipped}
        settled = _settled(self.led, self.tkey)
        sel = self.sel
        for p in props:
            if p.id in handled:
                continue
            st, cid = settled.get(p.fingerprint, ("pending", 0))
            if st != "pending":
                self.skipped.append(LoopSkip(proposal_id=p.id, candidate_id=cid,
                                             reason=f"already {_settled_word(st)} (candidate {cid})"))
                continue
            if sel is not None and sel.kernel is not None and not p.matches(sel.kernel, sel.short_name):
                reason = f"for kernel {p.kernel!r}, not the selected {sel.kernel}"
            else:
                reason = f"not reached ({stopped})"
            self.skipped.append(LoopSkip(proposal_id=p.id, reason=reason))

    def result(self, resumed: bool, stopped: StopReason, message: str) -> LoopResult:
        accepted = sum(1 for s in self.steps_out if s.decision == "accepted")
        errors = sum(1 for s in self.steps_out if s.decision == "error")
        sel = self.sel
        return LoopResult(
            ledger=str(self.led.path), experiment_id=self.exp_id, resumed=resumed, profile_id=self.pid,
            report=str(self.report) if self.report else None, candidate=sel.kernel if sel else None,
            diagnosis=sel.diagnosis if sel else None, steps=self.steps_out, skipped=self.skipped,
            accepted=accepted, rejected=len(self.steps_out) - accepted - errors, errors=errors, stopped=stopped,
            stop_message=message, warnings=self.warnings)

    # -- changes ---------------------------------------------------------------------------
    def change_of(self, cand: dict[str, Any]) -> AppliedChange:
        kind = cand["change_kind"]
        target = Path(cand["change_target"]) if cand.get("change_target") else None
        source = Path(cand["change_path"]) if cand.get("change_path") else None
        backup = None
        if kind == "file" and target is not None:
            backup = self.led.path.parent / "loop" / "backup" / f"c{cand['id']}" / target.name
        return AppliedChange(kind, target, source, base_sha256=cand.get("base_sha256"),
                             change_sha256=cand.get("change_sha256"), backup=backup)

    def settle_decided(self, exp_id: int) -> None:
        """Candidates already decided keep no backup. (A rejected change is never in place once its
        decision is recorded: the baseline is restored first. The file's hash cannot tell, since later
        candidates may write the same bytes to the same file.)"""
        for c in self.led.candidates(exp_id):
            if self.led.status(c["id"]) != "pending":
                self.change_of(c).drop_backup()

    # -- one candidate ---------------------------------------------------------------------
    def finish(self, cand: dict[str, Any], *, resumed: bool) -> LoopStep:
        """Validate (unless a validation is recorded), then accept or restore and record the decision."""
        cid = int(cand["id"])
        ch = self.change_of(cand)
        vals = self.led.validations(cid)
        result: Optional[dict[str, Any]] = vals[-1]["result"] if vals else None
        if result is None:
            failed = self.apply_or_fail(cand, ch, resumed)
            if failed is not None:
                return failed
            self.tell(f"validating {cand['proposal_id']} on {cand['kernel'] or 'the target'}")
            try:
                res = self.steps.validate(Path(cand["spec"]) if isinstance(cand["spec"], str) else cand["spec"])
                rec.add_validation(self.led, cid, res, key=f"c{cid}:validation")
            except KernelscopeError as exc:
                ch.revert()
                return self.error(cand, f"validation could not run: {exc}", resumed)
            except BaseException:
                ch.revert()  # a crash or an interrupt never leaves the change in place
                raise
            result = res
        why = _why(result)
        if result.get("accepted") is True:
            ch.apply()
            rec.add_decision(self.led, cid, "accepted", by=self.by, why=why, key=f"c{cid}:decision")
            ch.drop_backup()
            return self._step(cand, result, "accepted", why, resumed)
        ch.revert()
        rec.add_decision(self.led, cid, "reverted", by=self.by, why=why, key=f"c{cid}:decision")
        return self._step(cand, result, "reverted", why, resumed)

    def apply_or_fail(self, cand: dict[str, Any], ch: AppliedChange, resumed: bool) -> Optional[LoopStep]:
        """Apply the candidate's change; when it cannot be (a patch that no longer applies, a path out of
        bounds, an unwritable file) and nothing of it is in place, record an ``error`` and return its step.
        A file swap found edited meanwhile on a resumed run is the user's to settle (the original is kept)."""
        try:
            ch.apply()
            return None
        except ChangeConflictError as exc:
            if resumed and ch.kind == "file":
                raise
            reason = str(exc)
        except KernelscopeError as exc:
            reason = str(exc)
        if ch.kind == "file":
            try:
                if ch.state() == "base":
                    ch.drop_backup()
            except KernelscopeError:
                pass
        return self.error(cand, f"not applied: {reason}", resumed)

    def error(self, cand: dict[str, Any], why: str, resumed: bool) -> LoopStep:
        """Record that the candidate ended in an error (its change is not in place) and return its step."""
        cid = int(cand["id"])
        rec.add_decision(self.led, cid, "error", by=self.by, why=why, key=f"c{cid}:decision")
        return self._step(cand, None, "error", why, resumed)

    def _step(self, cand: dict[str, Any], result: Optional[dict[str, Any]], decision: str, why: str,
              resumed: bool) -> LoopStep:
        step = LoopStep(proposal_id=str(cand["proposal_id"]), candidate_id=int(cand["id"]), kernel=cand["kernel"],
                        verdict=None if result is None else result.get("verdict"), decision=decision,
                        why=why, speedup=None if result is None else result.get("speedup"), resumed=resumed)
        self.steps_out.append(step)
        return step

    # -- profiles --------------------------------------------------------------------------
    def current_profile(self, exp_id: int, given: Optional[Path]) -> tuple[int, Path, Selection]:
        led = self.led
        last_accept = led.query(
            "SELECT max(d.created_at) AS t FROM decisions d JOIN candidates c ON c.id = d.candidate_id "
            "WHERE c.experiment_id = ? AND d.decision = 'accepted'", (exp_id,))[0]["t"]
        if given is not None:
            sha = sha256_file(given)
            hit = led.by_key("profiles", f"e{exp_id}:report:{sha[:24]}")
            if hit is not None and hit["id"] in self._selections:
                pid, sel = hit["id"], self._selections[hit["id"]]
            else:
                self.tell(f"classifying {given.name}")
                sel = self.steps.select(given, self.cache_control)
                pid, _ = rec.add_profile(led, exp_id, report_path=str(given), classification=sel.classification,
                                            note="given report (not profiled by the loop)",
                                            key=f"e{exp_id}:report:{sha[:24]}")
            if last_accept is not None:
                self.warn(WarningCode.stale_profile, "a change was accepted after the given report was made: the "
                          "selection still reads the old profile (profile again to see the new bottleneck)")
            self._selections[pid] = sel
            return pid, given, sel
        profs = led.profiles(exp_id)
        if profs:
            p = profs[-1]
            report = Path(p["report_path"]) if p["report_path"] else None
            fresh = last_accept is None or p["created_at"] > last_accept
            if fresh and report is not None and report.is_file() and sha256_file(report) == p["report_sha256"]:
                if p["id"] not in self._selections:
                    self.tell(f"classifying {report.name}")
                    self._selections[p["id"]] = self.steps.select(report, self.cache_control)
                return int(p["id"]), report, self._selections[p["id"]]
        n = len(profs) + 1
        out = report_path(led.path.parent / "reports", exp_id, n, self.target)
        out.parent.mkdir(parents=True, exist_ok=True)
        self.tell(f"profiling {' '.join(self.target)[:60]}")
        report = Path(self.steps.profile(self.target, out, self.cache_control))
        if not report.is_file():
            raise FileMissingError("the profiler wrote no report", path=report)
        self.tell(f"classifying {report.name}")
        sel = self.steps.select(report, self.cache_control)
        pid, _ = rec.add_profile(led, exp_id, report_path=str(report), classification=sel.classification,
                                    key=f"e{exp_id}:p{n}")
        self._selections[pid] = sel
        return pid, report, sel


def report_path(reports: Path, exp_id: int, n: int, target: list[str]) -> Path:
    """Where the loop profiles into: ``reports/e<exp>-p<n>.ncu-rep`` beside the ledger, ``n`` the profiles
    recorded + 1. A file already there was written by a run that stopped before recording it (its parse
    failed, it was killed): when its sidecar names this target it is this loop's own leftover and is
    replaced (the profile step may overwrite the path it is given); otherwise (another ledger in the same
    directory, or no sidecar) the next free name ``e<exp>-p<n>-<k>.ncu-rep`` is used, so nothing is lost."""
    import json

    for k in range(1, 1000):
        out = reports / (f"e{exp_id}-p{n}.ncu-rep" if k == 1 else f"e{exp_id}-p{n}-{k}.ncu-rep")
        if not (out.exists() or out.is_symlink()):
            return out
        try:
            side = json.loads(out.with_name(out.name + ".json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(side, dict) and side.get("target") == list(target):
            return out
    raise InputError(f"{reports} holds 999 unrecorded reports for profile {n} of experiment {exp_id}",
                     hint="remove the leftovers, or pass another --ledger")


def _settled(led: Ledger, tkey: str) -> dict[str, tuple[str, int]]:
    """fingerprint -> (latest status, candidate id) over every experiment on the same target."""
    out: dict[str, tuple[str, int]] = {}
    for e in led.query("SELECT id FROM experiments WHERE target_key = ? ORDER BY id", (tkey,)):
        for c in led.candidates(e["id"]):
            if c["fingerprint"]:
                out[c["fingerprint"]] = (led.status(c["id"]), int(c["id"]))
    return out


def _advised_against(p: Proposal, sel: Selection) -> Optional[str]:
    if not p.kind:
        return None
    kind = p.kind.lower()
    for a in sel.avoid:
        if kind in a.lower() or a.lower() in kind:
            return a
    return None


def loop(req: LoopRequest, steps: LoopSteps, progress: Optional[ProgressFn] = None) -> LoopResult:
    """Run the loop with the given steps (``run_loop`` passes the engines: ``steps.default_steps``).

    A target that is one make_repro directory names one of its ops (``repro_op``, default op0): the loop's
    target is then that op's replay command (``replay_dir.ReproTarget.argv``: it is what the ledger records,
    keys experiments by and profiles), and proposals may give ``candidate`` instead of ``spec``."""
    target = list(req.target)
    replay = repro_target(target, req.repro_op)
    if replay is not None:
        target = list(replay.argv)
    props = load_proposals(req.proposals, target_repository(target), replay) if req.proposals else []
    given = Path(req.profile) if req.profile else None
    if given is not None and not given.is_file():
        raise FileMissingError("ncu report not found", path=given, hint="give the .ncu-rep or CSV run_ncu wrote")
    with Ledger.open(req.ledger) as led:
        run = _Run(led, req, target, steps, progress)
        resumed = run.open_experiment(req.fresh)
        run.settle_decided(run.exp_id)
        run.finish_pending()
        stopped, message = run.iterate(props, given)
        run.skip_unreached(props, stopped)
        return run.result(resumed, stopped, message)


def drive(target: list[str], *, steps: LoopSteps, progress: Optional[ProgressFn] = None,
          **fields: Any) -> LoopResult:
    """``loop`` called with run_loop's fields as keywords (tests and other drivers with their own steps): the
    request is validated as run_loop's faces validate it."""
    from pydantic import ValidationError

    from mcp_server.core.operation import invalid_arguments

    try:
        req = LoopRequest.model_validate({"target": list(target), **fields})
    except ValidationError as exc:
        raise InputError(invalid_arguments("run_loop", exc)) from None
    return loop(req, steps, progress)


def _settled_word(status: str) -> str:
    return "recorded as an error" if status == "error" else status


def _record_candidate(led: Ledger, exp_id: int, pid: Optional[int], sel: Selection, p: Proposal) -> tuple[int, bool]:
    ch = p.change
    # a refused change: nothing of it is read or recorded but the proposal and the reason
    refused = ch.problem is not None
    return rec.add_candidate(
        led, exp_id, profile_id=pid, kernel=sel.kernel, diagnosis=sel.diagnosis, proposal=p.text or None,
        proposal_id=p.id, change_kind="none" if refused else ch.kind,
        change_path=str(ch.source) if ch.source and not refused else None,
        change_target=str(ch.target) if ch.target and not refused else None, spec=p.spec_record(),
        fingerprint=p.fingerprint, key=f"e{exp_id}:{p.fingerprint}")


@engine(LoopRequest)
def run_loop(req: LoopRequest, progress: Optional[ProgressFn] = None) -> LoopResult:
    """The ``loop`` operation: the loop over the run_ncu / select_candidate / validate_candidate engines."""
    return loop(req, default_steps(req.gpu, repro_target(list(req.target), req.repro_op)), progress)
