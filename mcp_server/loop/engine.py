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
from mcp_server.core.replay_dir import repro_target
from mcp_server.core.vocab import ProgressFn, WarningCode
from mcp_server.ledger import engine as rec
from mcp_server.ledger.env import sha256_file, target_key, target_repo_dir, target_repository
from mcp_server.ledger.store import Ledger
from mcp_server.loop.changes import AppliedChange
from mcp_server.loop.models import LoopResult, LoopSkip, LoopStep
from mcp_server.loop.proposals import Proposal, load_proposals
from mcp_server.loop.steps import LoopSteps, Selection, default_steps


def _speedup_text(sp: Any) -> str:
    if not isinstance(sp, dict) or not isinstance(sp.get("median"), (int, float)):
        return ""
    s = f"speedup {sp['median']:.3f}x"
    if isinstance(sp.get("ci_low"), (int, float)) and isinstance(sp.get("ci_high"), (int, float)):
        s += f" [{sp['ci_low']:.3f}, {sp['ci_high']:.3f}]"
    return s


def _why(result: dict[str, Any]) -> str:
    """validate_candidate's first reason (it states the interval and the threshold), else verdict + speedup."""
    reasons = result.get("reasons") or []
    if reasons:
        return f"{result.get('verdict')}: {reasons[0]}"
    sp = _speedup_text(result.get("speedup"))
    return f"{result.get('verdict')}" + (f": {sp}" if sp else "")


def _spec_arg(spec: Any) -> Any:
    return Path(spec) if isinstance(spec, str) else spec


class _Run:
    def __init__(self, led: Ledger, target: list[str], steps: LoopSteps, *, by: str,
                 cache_control: Optional[str], progress: Optional[ProgressFn], iters: int):
        self.led = led
        self.target = target
        self.steps = steps
        self.by = by
        self.cache_control = cache_control
        self.progress = progress
        self.iters = iters
        self.done = 0
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
                res = self.steps.validate(_spec_arg(cand["spec"]))
                if hasattr(res, "model_dump"):
                    res = res.model_dump(mode="json")
                rec.record_validation(self.led, cid, res, key=f"c{cid}:validation")
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
            rec.record_decision(self.led, cid, "accepted", by=self.by, why=why, key=f"c{cid}:decision")
            ch.keep()
            return self._step(cand, result, "accepted", why, resumed)
        ch.revert()
        rec.record_decision(self.led, cid, "reverted", by=self.by, why=why, key=f"c{cid}:decision")
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
        rec.record_decision(self.led, cid, "error", by=self.by, why=why, key=f"c{cid}:decision")
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
                pid, _ = rec.record_profile(led, exp_id, report_path=str(given), classification=sel.classification,
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
        pid, _ = rec.record_profile(led, exp_id, report_path=str(report), classification=sel.classification,
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


def drive(target: list[str], *, steps: LoopSteps, iters: int = 5, proposals: Optional[str] = None,
          profile: Optional[str] = None, ledger: Optional[str] = None, cache_control: Optional[str] = None,
          max_rejects: int = 3, by: str = "loop", fresh: bool = False, repro_op: Optional[str] = None,
          progress: Optional[ProgressFn] = None) -> LoopResult:
    """Run the loop with the given steps (``run_loop`` passes the declared operations).

    A target that is one make_repro directory names one of its ops (``repro_op``, default op0): the loop's
    target is then that op's replay command (``replay_dir.ReproTarget.argv``: it is what the ledger records,
    keys experiments by and profiles), and proposals may give ``candidate`` instead of ``spec``."""
    target = list(target)
    if not target:
        raise InputError("target is empty: give the command to profile after --")
    replay = repro_target(target, repro_op)
    if replay is not None:
        target = list(replay.argv)
    props = load_proposals(proposals, target_repository(target), replay) if proposals else []
    given = Path(profile) if profile else None
    if given is not None and not given.is_file():
        raise FileMissingError("ncu report not found", path=given, hint="give the .ncu-rep or CSV run_ncu wrote")
    with Ledger.open(ledger) as led:
        tkey = target_key(target, target_repo_dir(target))
        same = led.query("SELECT * FROM experiments WHERE target_key = ? ORDER BY id", (tkey,))
        if same and not fresh:
            exp_id, resumed = int(same[-1]["id"]), True
        else:
            exp_id, created = rec.record_experiment(led, target, key=f"loop:{tkey}:{len(same) + 1}")
            resumed = not created
        run = _Run(led, target, steps, by=by, cache_control=cache_control, progress=progress, iters=iters)
        run.settle_decided(exp_id)
        # 1. a candidate left pending by an interrupted run is finished first
        rejects = 0
        for c in led.candidates(exp_id):
            if led.status(c["id"]) == "pending" and run.done < iters:
                step = run.finish(c, resumed=True)
                run.done += 1
                rejects = rejects if step.decision == "error" else 0 if step.decision == "accepted" else rejects + 1
                run.tell(f"{step.proposal_id}: {step.decision}")
        tried: set[str] = {s.proposal_id for s in run.steps_out}
        pid: Optional[int] = None
        report: Optional[Path] = None
        sel: Optional[Selection] = None
        stopped, message = "iters_done", f"validated {iters} proposal(s)"
        while True:
            if run.done >= iters:
                break
            if rejects >= max_rejects:
                stopped, message = "max_rejects", f"{rejects} proposals rejected in a row (max_rejects={max_rejects})"
                break
            pid, report, sel = run.current_profile(exp_id, given)
            if sel.kernel is None:
                stopped, message = "no_candidate", f"select_candidate chose no kernel: {sel.stop_reason}"
                break
            if not props:
                stopped = "no_proposals"
                message = (f"no proposals given: write [[proposal]] entries (each a validate_candidate spec) "
                           f"for {sel.short_name or sel.kernel} and run again with proposals")
                break
            settled = _settled(led, tkey)
            chosen: Optional[Proposal] = None
            for p in sorted(props, key=lambda q: (not (q.kernel and q.matches(sel.kernel, sel.short_name)), q.index)):
                if p.id in tried or any(s.proposal_id == p.id for s in run.skipped):
                    continue
                if p.fingerprint in settled:
                    st, cid = settled[p.fingerprint]
                    if st != "pending":
                        run.skipped.append(LoopSkip(proposal_id=p.id, candidate_id=cid, reason=(
                            f"already {_settled_word(st)} (candidate {cid}); edit the proposal or give it a new "
                            "id to try again")))
                        continue
                if not p.matches(sel.kernel, sel.short_name):
                    continue
                if p.change.problem is not None:  # refused before anything is applied: an error, then the next
                    with led.write():
                        cid, _ = _record_candidate(led, exp_id, pid, sel, p)
                        run.error(led.get("candidates", cid) or {"id": cid, "proposal_id": p.id, "kernel": sel.kernel},
                                  f"not applied: {p.change.problem}", False)
                    tried.add(p.id)
                    continue
                avoid = _advised_against(p, sel)
                if avoid and not p.force:
                    why = (f"not tried: the classification of {sel.short_name or sel.kernel} advises against "
                           f"{avoid} (set force = true to validate it anyway)")
                    with led.write():  # candidate and decision together: never a pending one to validate
                        cid, _ = _record_candidate(led, exp_id, pid, sel, p)
                        rec.record_decision(led, cid, "abandoned", by=by, why=why, key=f"c{cid}:decision")
                    run.skipped.append(LoopSkip(proposal_id=p.id, candidate_id=cid, reason=why))
                    continue
                if avoid:
                    run.warn(WarningCode.forced_proposal, f"{p.id}: validated although the classification of "
                             f"{sel.short_name or sel.kernel} advises against {avoid}")
                chosen = p
                break
            if chosen is None:
                stopped = "proposals_exhausted"
                message = f"no untried proposal fits the candidate {sel.kernel}"
                break
            cid, _ = _record_candidate(led, exp_id, pid, sel, chosen)
            step = run.finish(led.get("candidates", cid) or {}, resumed=False)
            tried.add(chosen.id)
            run.done += 1
            rejects = rejects if step.decision == "error" else 0 if step.decision == "accepted" else rejects + 1
            run.tell(f"{step.proposal_id}: {step.decision}")
        # proposals this run never reached
        handled = tried | {s.proposal_id for s in run.skipped}
        for p in props:
            if p.id in handled:
                continue
            if p.fingerprint in _settled(led, tkey):
                st, cid = _settled(led, tkey)[p.fingerprint]
                if st != "pending":
                    run.skipped.append(LoopSkip(proposal_id=p.id, candidate_id=cid,
                                                reason=f"already {_settled_word(st)} (candidate {cid})"))
                    continue
            if sel is not None and sel.kernel is not None and not p.matches(sel.kernel, sel.short_name):
                reason = f"for kernel {p.kernel!r}, not the selected {sel.kernel}"
            else:
                reason = f"not reached ({stopped})"
            run.skipped.append(LoopSkip(proposal_id=p.id, reason=reason))
        accepted = sum(1 for s in run.steps_out if s.decision == "accepted")
        errors = sum(1 for s in run.steps_out if s.decision == "error")
        return LoopResult(
            ledger=str(led.path), experiment_id=exp_id, resumed=resumed, profile_id=pid,
            report=str(report) if report else None, candidate=sel.kernel if sel else None,
            diagnosis=sel.diagnosis if sel else None, steps=run.steps_out, skipped=run.skipped,
            accepted=accepted, rejected=len(run.steps_out) - accepted - errors, errors=errors, stopped=stopped,
            stop_message=message, warnings=run.warnings)


def _settled_word(status: str) -> str:
    return "recorded as an error" if status == "error" else status


def _record_candidate(led: Ledger, exp_id: int, pid: Optional[int], sel: Selection, p: Proposal) -> tuple[int, bool]:
    ch = p.change
    if ch.problem is not None:  # refused: nothing of it is read or recorded but the proposal and the reason
        return rec.record_candidate(
            led, exp_id, profile_id=pid, kernel=sel.kernel, diagnosis=sel.diagnosis, proposal=p.text or None,
            proposal_id=p.id, change_kind="none", spec=p.spec_record(), fingerprint=p.fingerprint,
            key=f"e{exp_id}:{p.fingerprint}")
    return rec.record_candidate(
        led, exp_id, profile_id=pid, kernel=sel.kernel, diagnosis=sel.diagnosis, proposal=p.text or None,
        proposal_id=p.id, change_kind=ch.kind, change_path=str(ch.source) if ch.source else None,
        change_target=str(ch.target) if ch.target else None, spec=p.spec_record(), fingerprint=p.fingerprint,
        key=f"e{exp_id}:{p.fingerprint}")


def run_loop(target: list[str], iters: int = 5, proposals: Optional[str] = None, profile: Optional[str] = None,
             ledger: Optional[str] = None, gpu: Optional[str] = None, cache_control: Optional[str] = None,
             max_rejects: int = 3, by: str = "loop", fresh: bool = False, repro_op: Optional[str] = None,
             progress: Optional[ProgressFn] = None) -> LoopResult:
    """The ``loop`` operation: the loop over the declared run_ncu / select_candidate / validate_candidate."""
    replay = repro_target(list(target), repro_op)
    return drive(target, steps=default_steps(gpu, replay), iters=iters, proposals=proposals, profile=profile,
                 ledger=ledger, cache_control=cache_control, max_rejects=max_rejects, by=by, fresh=fresh,
                 repro_op=repro_op, progress=progress)
