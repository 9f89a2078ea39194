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

[proposal.apply]                          # optional; without it nothing is applied (the spec alone names the kernel)
file = "src/attn_kernel.py"               # file swap: this file ...
with = "proposals/attn_kernel_int4.py"    # ... replaced by this one while validating; restored unless accepted
# patch = "proposals/int4.patch"          # or a git patch, applied with `git apply` in repo
# (repo defaults to the folder holding the patch)
# repo  = "."
```

Paths are relative to the proposals file. A proposal's fingerprint hashes its id, its
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
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_server.errors import FileMissingError, ProposalError
from mcp_server.userregex import compile_user_regex

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = None

_SPEC_FILE_FIELDS = ("baseline", "candidate", "inputs")


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
    spec: Union[str, dict[str, Any]]
    apply: Optional[ApplySpec] = None


@dataclass(frozen=True)
class Change:
    """A resolved change: ``kind`` file (``target`` replaced by ``source``), patch (``source`` applied in
    ``target``, a directory) or none."""

    kind: str
    target: Optional[Path] = None
    source: Optional[Path] = None


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


def _sha_file(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


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
        doc["spec"] = _sha_file(spec)
    else:
        doc["spec"] = json.dumps(spec, sort_keys=True, default=str)
    if change.source is not None:
        doc["change"] = _sha_file(change.source)
        doc["target"] = str(change.target)
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


def load_proposals(path: Union[str, Path]) -> list[Proposal]:
    """Read and check a proposals file (TOML, ``[[proposal]]`` tables); every path must exist."""
    src = Path(path)
    if not src.is_file():
        raise FileMissingError("proposals file not found", path=src)
    if tomllib is None:  # pragma: no cover
        raise ProposalError("reading TOML needs Python 3.11", path=src)
    try:
        doc = tomllib.loads(src.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
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
        if isinstance(p.spec, str):
            spec_file = (base / p.spec).resolve()
            if not spec_file.is_file():
                raise ProposalError(f"proposal {p.id!r}: spec file not found: {p.spec}", path=src)
            spec: Union[Path, dict[str, Any]] = spec_file
        else:
            spec = _resolve_spec_fields(p.spec, base)
        change = _change(p, base, src)
        out.append(Proposal(id=p.id, text=p.text, kernel=p.kernel, kind=p.kind, force=p.force, spec=spec,
                            change=change, fingerprint=fingerprint(p, spec, change), index=i))
    return out


def _change(p: ProposalSpec, base: Path, src: Path) -> Change:
    a = p.apply
    if a is None or (a.file is None and a.with_ is None and a.patch is None):
        return Change("none")
    if a.patch is not None:
        if a.file or a.with_:
            raise ProposalError(f"proposal {p.id!r}: apply has both a patch and a file swap; give one", path=src)
        patch = (base / a.patch).resolve()
        if not patch.is_file():
            raise ProposalError(f"proposal {p.id!r}: patch not found: {a.patch}", path=src)
        repo = (base / a.repo).resolve() if a.repo else patch.parent
        if not repo.is_dir():
            raise ProposalError(f"proposal {p.id!r}: repo is not a directory: {a.repo}", path=src)
        return Change("patch", target=repo, source=patch)
    if not (a.file and a.with_):
        raise ProposalError(f"proposal {p.id!r}: a file swap needs both apply.file and apply.with", path=src)
    target, source = (base / a.file).resolve(), (base / a.with_).resolve()
    if not target.is_file():
        raise ProposalError(f"proposal {p.id!r}: apply.file not found: {a.file}", path=src)
    if not source.is_file():
        raise ProposalError(f"proposal {p.id!r}: apply.with not found: {a.with_}", path=src)
    if target == source:
        raise ProposalError(f"proposal {p.id!r}: apply.file and apply.with are the same file", path=src)
    return Change("file", target=target, source=source)
