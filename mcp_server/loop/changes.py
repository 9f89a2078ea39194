"""Applying and reverting a proposal's change, so a rejected change never stays in place.

* **file swap**: the target's original bytes are first copied to a backup beside the
  ledger (atomically), then the replacement is written over the target (atomically).
  Reverting writes the backup back; accepting drops the backup. Every step is atomic
  and the state is read back from the file's hash against the hashes the ledger holds
  (``base_sha256`` before, ``change_sha256`` after), so a process killed anywhere in
  between is put right on the next start.
* **git patch**: ``git apply`` / ``git apply -R`` in the target repository; the state is
  whichever of ``git apply --check`` / ``git apply -R --check`` succeeds. git runs through
  ``proc.git``: nothing the repository configures (hooks, filters, fsmonitor) is executed.

Every write is checked first, whatever the ledger says (a ledger is a file too): over MCP the
files read and written lie inside the call's roots, and nothing is written inside ``.git``.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Literal, Optional

from mcp_server.core import proc
from mcp_server.core.atomic import atomic_write_bytes, check_confined, real_path, unlink_quietly
from mcp_server.core.errors import ChangeConflictError, ConfinementError, ToolMissingError
from mcp_server.ledger.patches import bad_patch_path, patch_paths

State = Literal["base", "applied", "conflict"]


def _sha(p: Path) -> Optional[str]:
    try:
        return hashlib.sha256(p.read_bytes()).hexdigest()
    except OSError:
        return None


class AppliedChange:
    """One candidate's change: ``kind`` file / patch / none, with the hashes the ledger recorded."""

    def __init__(self, kind: str, target: Optional[Path], source: Optional[Path], *, base_sha256: Optional[str],
                 change_sha256: Optional[str], backup: Optional[Path]):
        self.kind = kind
        self.target = target
        self.source = source
        self.base_sha256 = base_sha256
        self.change_sha256 = change_sha256
        self.backup = backup

    # -- state -----------------------------------------------------------------------------
    def state(self) -> State:
        if self.kind == "none":
            return "base"
        if self.kind == "file":
            assert self.target is not None
            cur = _sha(self.target)
            if cur == self.base_sha256:
                return "base"
            if cur == self.change_sha256:
                return "applied"
            return "conflict"
        if self._git("apply", "--check").rc == 0:
            return "base"
        if self._git("apply", "-R", "--check").rc == 0:
            return "applied"
        return "conflict"

    def _conflict(self, doing: str) -> ChangeConflictError:
        if self.kind == "file":
            return ChangeConflictError(
                f"cannot {doing}: the file matches neither its recorded original (sha256 "
                f"{(self.base_sha256 or '?')[:12]}) nor the proposal's replacement "
                f"({(self.change_sha256 or '?')[:12]})",
                path=self.target, hint="it was edited meanwhile: restore it (the original is kept at "
                f"{self.backup}) or record the candidate as abandoned")
        return ChangeConflictError(f"cannot {doing}: the patch {self.source} neither applies nor reverts cleanly",
                                   path=self.target, hint="the tree differs from what the patch expects, before "
                                   "and after it: update the patch, or fix the tree by hand")

    # -- checks ----------------------------------------------------------------------------
    def guard(self) -> None:
        """Refuse a change that would read or write out of bounds: outside the roots (over MCP), inside .git,
        a patch that is none or names an absolute, '..' or .git path."""
        if self.kind == "none":
            return
        for p, what in ((self.target, "the change's target"), (self.source, "the change's file"),
                        (self.backup, "the loop's backup")):
            if p is not None:
                check_confined(p, what)
        if self.target is not None and any(x.lower() == ".git" for x in real_path(self.target).parts):
            raise ConfinementError(f"the change's target {self.target} lies inside .git: the loop never writes there")
        if self.kind == "patch" and self.source is not None:
            try:
                text = self.source.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise ChangeConflictError(f"patch unreadable: {exc.strerror or exc}", path=self.source) from None
            paths = patch_paths(text)
            if not paths:
                raise ConfinementError("not a unified diff: the loop applies patches only", path=self.source)
            for raw in paths:
                why = bad_patch_path(raw)
                if why is not None:
                    raise ConfinementError(f"the patch is refused: {why}", path=self.source)

    # -- actions ---------------------------------------------------------------------------
    def apply(self) -> None:
        self.guard()
        st = self.state()
        if st == "applied" or self.kind == "none":
            return
        if st == "conflict":
            raise self._conflict("apply the change")
        if self.kind == "file":
            assert self.target and self.source and self.backup
            self.backup.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(self.backup, self.target.read_bytes(), what="loop backup")
            atomic_write_bytes(self.target, self.source.read_bytes(), what="proposed change")
        else:
            r = self._git("apply")
            if r.rc != 0:
                raise ChangeConflictError(f"git apply failed: {r.stderr.strip()[-300:]}", path=self.source)

    def revert(self) -> None:
        """Put the baseline back (nothing to do when it is already there)."""
        self.guard()
        st = self.state()
        if st == "base" or self.kind == "none":
            self.drop_backup()
            return
        if st == "conflict":
            raise self._conflict("restore the baseline")
        if self.kind == "file":
            assert self.target and self.backup
            if _sha(self.backup) != self.base_sha256:
                raise ChangeConflictError("the backup of the original is missing or altered", path=self.backup,
                                          hint=f"restore {self.target} by hand (git checkout, or your copy)")
            atomic_write_bytes(self.target, self.backup.read_bytes(), what="restored baseline")
            self.drop_backup()
        else:
            r = self._git("apply", "-R")
            if r.rc != 0:
                raise ChangeConflictError(f"git apply -R failed: {r.stderr.strip()[-300:]}", path=self.source)

    def drop_backup(self) -> None:
        if self.backup is not None:
            unlink_quietly(self.backup)

    def _git(self, *args: str) -> proc.ProcResult:
        if shutil.which("git") is None:
            raise ToolMissingError("git not found: patch proposals need git", hint="install git or use a file swap")
        assert self.target is not None and self.source is not None
        return proc.git(self.target, *args, str(self.source), timeout=60)
