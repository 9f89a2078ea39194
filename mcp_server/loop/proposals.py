"""The proposals file of an unattended loop: each proposal a candidate spec plus how to apply it.

```toml
[[proposal]]
id     = "int4-w4a16"                     # unique in the file; the ledger keys on it
text   = "Swap the BF16 BMM for the INT4 W4A16 kernel: it is DRAM-bound, INT4 moves 1/4 of the bytes"
kernel = "regex:.*bmm.*"                  # optional: only when the selected kernel matches (exact, short name, regex:)
kind   = "quantization"                   # optional: the kind of change; skipped when the classification
                                          # advises against it
force  = false                            # validate even when advised against (the worked example's L2-resident case)
spec   = "specs/int4.toml"                # the candidate spec for validate_candidate (a path, or an inline table)
# candidate = "my_kernel.py:op0"          # instead of spec, when the loop's target is a make_repro directory: the
                                          # repro op's spec (spec_<op>.toml) with this candidate; an inline spec
                                          # table beside it overrides that spec's fields (cache = "warm", ...)

[proposal.apply]                          # optional; without it nothing is applied (the spec alone names the kernel)
file = "src/attn_kernel.py"               # file swap: this file ...
with = "proposals/attn_kernel_int4.py"    # ... replaced by this one while validating; restored unless accepted
# patch = "proposals/int4.patch"          # or a git patch, applied with `git apply` in repo
# (repo defaults to the folder holding the patch)
# repo  = "."
```

Paths are relative to the proposals file (a repro op's spec keeps its baseline and inputs, read from the
repro directory). A change may only write inside the target's repository (the git work tree holding
the target's script, else the script's folder), never inside ``.git``: ``apply.file`` is a relative path
without ``..`` that resolves (symlinks followed) there, a patch names only such paths and applies in a
``repo`` there; over MCP every file the change reads or writes also lies
inside the server's roots. A proposal that breaks a rule is not applied: the loop records it as an
``error`` with the reason and moves on. A proposal's fingerprint hashes its id, its
spec (the spec file's text, or the inline table), its change (the replacement file's or the
patch's bytes) and ``force``: edit any of them and it counts as a new proposal; otherwise a
proposal the ledger holds as decided is never tried again. The files the spec's functions
live in are not hashed (an accepted change edits the target's files, which must not make
every proposal look new): after editing only a kernel the spec points at, give the
proposal a new id.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_server.core import limits
from mcp_server.core.atomic import call_roots, inside, real_path
from mcp_server.core.errors import FileMissingError, ProposalError
from mcp_server.core.replay_dir import ReproTarget
from mcp_server.core.userregex import compile_user_regex
from mcp_server.ledger.env import sha256_file
from mcp_server.ledger.patches import bad_patch_path, patch_paths, strip_prefix

_SPEC_FILE_FIELDS = ("baseline", "candidate", "inputs")
#: A replacement file or a patch larger than this is refused (it is read whole and hashed).
MAX_CHANGE_BYTES = 64 << 20


class ApplySpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    file: Optional[str] = Field(None, description="the file a file swap replaces")
    with_: Optional[str] = Field(None, alias="with", description="the replacement file")
    patch: Optional[str] = Field(None, description="a git patch")
    repo: Optional[str] = Field(None, description="where the patch applies (default: the patch's git work tree)")


class ProposalSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    text: str = ""
    kernel: Optional[str] = None
    kind: Optional[str] = None
    force: bool = False
    spec: Optional[Union[str, dict[str, Any]]] = None
    candidate: Optional[str] = Field(None, min_length=1, description=(
        "'file.py:function': validated against the repro op's spec (the loop's target is a repro directory)"))
    apply: Optional[ApplySpec] = None


@dataclass(frozen=True)
class Change:
    """A resolved change: ``kind`` file (``target`` replaced by ``source``), patch (``source`` applied in
    ``target``, a directory) or none. ``problem``: why it may not be applied (then nothing is read or written;
    ``raw`` holds the paths as written, for the fingerprint)."""

    kind: str
    target: Optional[Path] = None
    source: Optional[Path] = None
    problem: Optional[str] = None
    raw: tuple[str, ...] = ()


@dataclass(frozen=True)
class Proposal:
    id: str
    text: str
    kernel: Optional[str]
    kind: Optional[str]
    force: bool
    spec: Union[Path, dict[str, Any]]  # a spec file, or inline fields (paths made absolute)
    change: Change
    fingerprint: str
    index: int

    def spec_record(self) -> Any:
        return str(self.spec) if isinstance(self.spec, Path) else self.spec

    def matches(self, kernel: Optional[str], short_name: Optional[str] = None) -> bool:
        """Whether this proposal applies to the selected kernel (no ``kernel`` field: any kernel)."""
        if not self.kernel:
            return True
        names = [n for n in (kernel, short_name) if n]
        if self.kernel.startswith("regex:"):
            pat = compile_user_regex(self.kernel[len("regex:"):], ignorecase=False,
                                     where=f"proposal {self.id!r}: kernel", error=ProposalError)
            return any(pat.search(n) for n in names)
        return self.kernel in names


def _resolve_spec_fields(fields: dict[str, Any], base: Path) -> dict[str, Any]:
    """Inline spec: make ``path.py:function`` references absolute (relative to the proposals file)."""
    out = dict(fields)
    for k in _SPEC_FILE_FIELDS:
        v = out.get(k)
        if isinstance(v, str) and ":" in v:
            file, _, fn = v.rpartition(":")
            if file.endswith(".py") and not Path(file).is_absolute():
                out[k] = f"{(base / file).resolve()}:{fn}"
    return out


def fingerprint(p: ProposalSpec, spec: Union[Path, dict[str, Any]], change: Change) -> str:
    doc: dict[str, Any] = {"id": p.id, "force": p.force, "kind": change.kind}
    if isinstance(spec, Path):
        doc["spec"] = sha256_file(spec)
    else:
        doc["spec"] = json.dumps(spec, sort_keys=True, default=str)
    if change.problem is not None:
        doc["refused"] = list(change.raw)
    elif change.source is not None:
        doc["change"] = sha256_file(change.source)
        doc["target"] = str(change.target)
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


def _repro_spec(p: ProposalSpec, base: Path, src: Path, repro: Optional[ReproTarget]) -> dict[str, Any]:
    """A ``candidate`` proposal's spec: the repro op's spec (its paths made absolute from the repro directory),
    the proposal's inline spec fields over it, and the candidate (from the proposals file's folder)."""
    where = f"proposal {p.id!r}"
    if repro is None:
        raise ProposalError(f"{where}: candidate needs a repro directory as the loop's target (its op's spec is "
                            "the baseline)", path=src, hint="give spec = a validate_candidate spec instead")
    if isinstance(p.spec, str):
        raise ProposalError(f"{where}: give candidate or a spec file, not both", path=src,
                            hint="an inline spec table beside candidate overrides fields of the repro op's spec")
    if repro.spec is None:
        raise ProposalError(f"{where}: the repro op {repro.op} ({repro.name}) has no spec (make_repro writes none "
                            "for in-place ops)", path=src, hint="give spec = a validate_candidate spec")
    try:
        doc = limits.loads_toml(repro.spec.read_text(encoding="utf-8"), "repro spec", path=repro.spec)
    except (OSError, ValueError):  # ValueError: a TOML syntax error or text that is not UTF-8
        raise ProposalError(f"{where}: the repro spec is not readable TOML", path=repro.spec) from None
    cand = p.candidate or ""
    file, sep, fn = cand.rpartition(":")
    if not sep or not file or not fn:
        raise ProposalError(f"{where}: candidate is not 'file.py:function' or 'module:function'", path=src)
    if file.endswith(".py") and not (base / file).is_file():
        raise ProposalError(f"{where}: candidate file not found: {file}", path=src)
    spec = _resolve_spec_fields(doc, repro.directory)
    spec.update(_resolve_spec_fields(dict(p.spec or {}), base))
    spec["candidate"] = _resolve_spec_fields({"candidate": cand}, base)["candidate"]
    return spec


def load_proposals(path: Union[str, Path], repository: Optional[Path] = None,
                   repro: Optional[ReproTarget] = None) -> list[Proposal]:
    """Read and check a proposals file (TOML, ``[[proposal]]`` tables). ``repository``: the folder changes may
    write in (the target's repository); a change that breaks the rules (see the module's text) carries its
    ``problem`` instead of failing the file. ``repro``: the loop's target is this repro op, so a proposal may
    give ``candidate`` instead of ``spec``."""
    src = Path(path)
    if not src.is_file():
        raise FileMissingError("proposals file not found", path=src)
    if src.stat().st_size > MAX_CHANGE_BYTES:
        raise ProposalError(f"over {MAX_CHANGE_BYTES >> 20} MiB: not a proposals file", path=src)
    try:
        doc = limits.loads_toml(src.read_text(encoding="utf-8"), "proposals file", path=src)
    except ValueError as exc:  # a TOML syntax error or text that is not UTF-8
        raise ProposalError(f"not valid TOML ({exc})", path=src) from None
    extra = sorted(set(doc) - {"proposal"})
    if extra:
        raise ProposalError(f"unknown top-level key(s) {', '.join(extra)}", path=src,
                            hint="proposals are [[proposal]] tables")
    raw = doc.get("proposal")
    if not isinstance(raw, list) or not raw:
        raise ProposalError("no [[proposal]] tables", path=src, hint="see docs/loop-skill-section.md for the format")
    base = src.resolve().parent
    out: list[Proposal] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        try:
            p = ProposalSpec.model_validate(item)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise ProposalError(f"proposal {i + 1}: {loc}: {err['msg']}", path=src) from None
        if p.id in seen:
            raise ProposalError(f"proposal id {p.id!r} given twice", path=src, hint="ids must be unique")
        seen.add(p.id)
        if p.kernel and p.kernel.startswith("regex:"):  # a bad pattern is the file's error, found when it is read
            compile_user_regex(p.kernel[len("regex:"):], ignorecase=False, where=f"proposal {p.id!r}: kernel",
                               error=ProposalError, path=src)
        if p.candidate is not None:
            spec: Union[Path, dict[str, Any]] = _repro_spec(p, base, src, repro)
        elif p.spec is None:
            raise ProposalError(f"proposal {p.id!r}: spec missing", path=src, hint=(
                "give spec = a validate_candidate spec, or (with a repro directory as the loop's target) "
                "candidate = 'file.py:function'"))
        elif isinstance(p.spec, str):
            spec_file = (base / p.spec).resolve()
            if not spec_file.is_file():
                raise ProposalError(f"proposal {p.id!r}: spec file not found: {p.spec}", path=src)
            spec = spec_file
        else:
            spec = _resolve_spec_fields(p.spec, base)
        change = _change(p, base, src, repository)
        out.append(Proposal(id=p.id, text=p.text, kernel=p.kernel, kind=p.kind, force=p.force, spec=spec,
                            change=change, fingerprint=fingerprint(p, spec, change), index=i))
    return out


def _file_problem(p: Path, what: str, raw: str) -> Optional[str]:
    """Why ``p`` cannot be read as a change's file (missing, not a regular file, too large), or None."""
    try:
        st = os.stat(p)
    except OSError:
        return f"{what} not found: {raw}"
    if not stat.S_ISREG(st.st_mode):
        return f"{what} is not a regular file: {raw}"
    if st.st_size > MAX_CHANGE_BYTES:
        return f"{what} is over {MAX_CHANGE_BYTES >> 20} MiB: {raw}"
    return None


def _outside(p: Path, what: str, raw: str, repository: Optional[Path], *, writes: bool) -> Optional[str]:
    """Why the resolved path ``p`` is out of bounds: inside ``.git`` or outside the target's repository (what
    the change writes), outside the server's roots (anything it reads or writes, over MCP); or None."""
    if writes and any(part.lower() == ".git" for part in p.parts):
        return f"{what} {raw} resolves inside .git ({p})"
    if writes and repository is not None and not inside(p, [repository]):
        return f"{what} {raw} resolves to {p}, outside the target's repository {real_path(repository)}"
    roots = call_roots()
    if roots is not None and not inside(p, roots):
        return (f"{what} {raw} resolves to {p}, outside the directories this server may use "
                f"({', '.join(str(r) for r in roots)})")
    return None


def _change(p: ProposalSpec, base: Path, src: Path, repository: Optional[Path] = None) -> Change:
    a = p.apply
    if a is None or (a.file is None and a.with_ is None and a.patch is None):
        return Change("none")
    if a.patch is not None:
        if a.file or a.with_:
            raise ProposalError(f"proposal {p.id!r}: apply has both a patch and a file swap; give one", path=src)
        raw = (a.patch, a.repo or "")
        patch = real_path(base / a.patch)
        repo = real_path(base / a.repo) if a.repo else patch.parent
        problem = _file_problem(patch, "patch", a.patch) or _outside(patch, "patch", a.patch, None, writes=False)
        if problem is None and not repo.is_dir():
            problem = f"repo is not a directory: {a.repo}"
        problem = problem or _outside(repo, "repo", a.repo or str(repo), repository, writes=True)
        if problem is None:
            problem = _patch_problem(patch, repo, repository)
        if problem is not None:
            return Change("patch", problem=f"proposal {p.id!r}: {problem}", raw=raw)
        return Change("patch", target=repo, source=patch)
    if not (a.file and a.with_):
        raise ProposalError(f"proposal {p.id!r}: a file swap needs both apply.file and apply.with", path=src)
    raw = (a.file, a.with_)
    written = PurePath(a.file)
    problem = None
    if written.is_absolute() or a.file.startswith("~"):
        problem = f"apply.file {a.file} is absolute: give it relative to the proposals file, inside the repository"
    elif ".." in written.parts:
        problem = f"apply.file {a.file} goes up a folder ('..'): give a path inside the repository"
    target, source = real_path(base / a.file), real_path(base / a.with_)
    problem = problem or _file_problem(target, "apply.file", a.file) or _outside(
        target, "apply.file", a.file, repository, writes=True)
    problem = problem or _file_problem(source, "apply.with", a.with_) or _outside(
        source, "apply.with", a.with_, None, writes=False)
    if problem is None and target == source:
        problem = "apply.file and apply.with are the same file"
    if problem is not None:
        return Change("file", problem=f"proposal {p.id!r}: {problem}", raw=raw)
    return Change("file", target=target, source=source)


def _patch_problem(patch: Path, repo: Path, repository: Optional[Path]) -> Optional[str]:
    """Why the patch may not be applied in ``repo``: not a unified diff, or a path it writes that is absolute,
    goes up, lies in .git or resolves (symlinks followed) outside the repository or the roots."""
    try:
        text = patch.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"patch unreadable: {exc.strerror or exc}"
    paths = patch_paths(text)
    if not paths:
        return f"{patch.name} is not a unified diff (no ---/+++ header with a hunk, no 'diff --git' line)"
    for raw in paths:
        why = bad_patch_path(raw)
        if why is not None:
            return f"patch {patch.name}: {why}"
        dest = real_path(repo / strip_prefix(raw))
        why = _outside(dest, f"patch {patch.name}: path", raw, repository or repo, writes=True)
        if why is not None:
            return why
    return None
