"""Find the traces of a set and the rank of each (docs/ARCHITECTURE.md, "Trace sets").

Inputs are trace files, directories (their ``*.json``, ``*.json.gz`` and
``*.json.zst`` files, not recursive) and glob patterns. A trace's rank is
``distributedInfo.rank``, which the torch profiler writes before
``traceEvents``: only the head of the decompressed text is read. A trace without
it takes the rank from its file name (``-TP-3``, ``rank3``, ``rank_3``) with a
``rank_from_filename`` warning. Duplicate ranks, mixed world sizes and traces
with no rank at all are refused before any analysis starts.
"""
from __future__ import annotations

import glob
import itertools
import json
import os
import re
from pathlib import Path
from typing import Any, Literal, Optional

from mcp_server.core.errors import FileMissingError, TraceFormatError, TraceSetError
from mcp_server.core.limits import limit, over
from mcp_server.core.models import Warning_
from mcp_server.core.vocab import WarningCode
from mcp_server.traces._reader import GuardedReader, check_path
from mcp_server.tracesets.models import RankRef

TRACE_SUFFIXES = (".json", ".json.gz", ".json.zst")
#: decompressed bytes read looking for distributedInfo (it precedes traceEvents)
HEAD_BYTES = 1 << 20
_GLOB = re.compile(r"[*?\[]")
_NAME_RANK = (re.compile(r"(?i)-TP-(\d+)(?!\d)"), re.compile(r"(?i)(?:^|[^a-z])rank[_-]?(\d+)(?!\d)"))
_DIST = re.compile(rb'"distributedInfo"\s*:\s*')
_EVENTS = re.compile(rb'"traceEvents"\s*:')
#: nesting levels a distributedInfo may have (the profiler writes an object holding a list of process-group
#: objects: 4 levels); deeper is refused before decoding
MAX_INFO_DEPTH = 32
_JSON_NEST = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def expand(inputs: list[str]) -> list[Path]:
    """Every trace file named by ``inputs`` (files, directories, globs), each once, in a stable order."""
    found: list[Path] = []
    for item in inputs:
        p = Path(os.path.expanduser(item))
        if p.is_dir():
            hits = sorted(q for q in p.iterdir() if q.is_file() and q.name.lower().endswith(TRACE_SUFFIXES))
            if not hits:
                raise TraceSetError(f"no trace files (*.json, *.json.gz, *.json.zst) in directory {item}")
            found += hits
        elif _GLOB.search(item) and not p.exists():
            hits = sorted(Path(h) for h in glob.glob(os.path.expanduser(item)) if Path(h).is_file())
            if not hits:
                raise TraceSetError(f"the pattern {item} matches no file")
            found += hits
        else:
            found.append(check_path(p))
    unique: dict[Path, Path] = {}
    for p in found:
        unique.setdefault(p.resolve(), p)
    return list(unique.values())


def distributed_info(p: Path) -> Optional[dict[str, Any]]:
    """``distributedInfo`` from the head of the trace text, or None when the head has none."""
    with GuardedReader(p) as r:
        head = r.read(HEAD_BYTES)
    m = _DIST.search(head)
    if not m:
        return None
    ev = _EVENTS.search(head)
    if ev and ev.start() < m.start():
        return None  # inside the events: not the top-level key
    _check_depth(head, m.end(), p)
    try:
        obj, _ = json.JSONDecoder().raw_decode(head[m.end():].decode("utf-8", "replace"))
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _check_depth(head: bytes, start: int, p: Path) -> None:
    """Refuse a distributedInfo nested deeper than ``MAX_INFO_DEPTH`` (the decoder would recurse on it)."""
    depth = 0
    for tok in _JSON_NEST.finditer(head, start):
        c = tok.group()[:1]
        if c in (b"[", b"{"):
            depth += 1
            if depth > MAX_INFO_DEPTH:
                raise TraceFormatError(f"distributedInfo is nested more than {MAX_INFO_DEPTH} levels deep "
                                       "(a profiler writes a small object)", path=p)
        elif c in (b"]", b"}"):
            depth -= 1
        if depth <= 0:
            return


def rank_from_name(p: Path) -> Optional[int]:
    for pat in _NAME_RANK:
        m = pat.search(p.name)
        if m:
            digits = m.group(1).lstrip("0") or "0"
            return int(digits) if len(digits) <= 18 else _TOO_LARGE
    return None


#: stands for a number too long to convert (the bound check below names it by its digits)
_TOO_LARGE = 1 << 63


def _as_int(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _shown(n: int) -> str:
    """A number for a message: as is, or by its length when it is absurdly long (10**400)."""
    text = str(n) if n < 10**18 else ""
    return text or f"a {len(str(n)) if n < 10**4000 else 'more than 4000'}-digit number"


def check_world(value: int, what: str, p: Path | str) -> None:
    """``LimitError`` naming ``KERNELSCOPE_MAX_WORLD_SIZE`` when a world size or rank number is over it; checked
    before anything is sized by it (a 214-byte trace claiming world_size 10**12 asked for 8 GB)."""
    cap = limit("WORLD_SIZE")
    bound = cap if what == "world size" else cap - 1
    if value > bound:
        shown = _shown(value) if value != _TOO_LARGE else "a number of over 18 digits"
        label = "distributedInfo.world_size" if what == "world size" else "the rank number"
        raise over("WORLD_SIZE", label, shown, path=p)


def resolve_ranks(inputs: list[str]) -> tuple[list[RankRef], Optional[int], list[Warning_]]:
    """The set's traces with their ranks (sorted by rank), its world size, and warnings."""
    paths = expand(inputs)
    if not paths:
        raise TraceSetError("no traces given")
    refs: list[RankRef] = []
    by_name: list[str] = []
    for p in paths:
        try:
            info = distributed_info(p)
        except OSError as exc:
            raise FileMissingError(f"cannot read the trace: {exc.strerror or exc}", path=p) from None
        rank = _as_int((info or {}).get("rank"))
        world = _as_int((info or {}).get("world_size")) or None  # 0 is no world size
        if world is not None:
            check_world(world, "world size", p)
        source: Literal["distributedInfo", "file name"] = "distributedInfo"
        if rank is None:
            rank = rank_from_name(p)
            source = "file name"
            if rank is None:
                raise TraceSetError(
                    "the trace has no distributedInfo.rank and its file name carries no rank", path=p,
                    hint="name it like <run>-TP-<rank>.trace.json.gz or <run>.rank<N>.json.gz")
            by_name.append(f"{p.name} -> {rank}")
        check_world(rank, "rank number", p)
        refs.append(RankRef(rank=rank, path=str(p), world_size=world, rank_source=source))
    _check_unique(refs)
    worlds = sorted({r.world_size for r in refs if r.world_size is not None})
    if len(worlds) > 1:
        shown = "; ".join(f"{r.path}: {r.world_size}" for r in refs if r.world_size is not None)
        raise TraceSetError(f"the traces come from runs of different world sizes ({shown})",
                            hint="give the traces of one run")
    world = worlds[0] if worlds else None
    warnings: list[Warning_] = []
    if by_name:
        warnings.append(Warning_(code=WarningCode.rank_from_filename, count=len(by_name), message=(
            "no distributedInfo in the trace head; rank read from the file name: " + ", ".join(by_name[:16])
            + (f" and {len(by_name) - 16} more" if len(by_name) > 16 else ""))))
    refs.sort(key=lambda r: r.rank)
    if world is not None:
        outside = [r for r in refs if r.rank >= world]
        if outside:
            raise TraceSetError(f"rank {outside[0].rank} is outside the world size {world}", path=outside[0].path)
        if len(refs) < world:
            have = {r.rank for r in refs}
            n_missing = world - len(have)  # ranks are unique and below the world size: no list of them is built
            missing = list(itertools.islice((k for k in range(world) if k not in have), 32))
            warnings.append(Warning_(code=WarningCode.ranks_missing, count=n_missing, message=(
                f"{len(refs)} of {world} ranks present; missing: " + ", ".join(map(str, missing))
                + (" ..." if n_missing > 32 else ""))))
    return refs, world, warnings


def _check_unique(refs: list[RankRef]) -> None:
    first: dict[int, RankRef] = {}
    for r in refs:
        if r.rank in first:
            raise TraceSetError(
                f"rank {r.rank} appears twice: {first[r.rank].path} and {r.path}",
                hint="a set holds one trace per rank; give the traces of one run (or one step) only")
        first[r.rank] = r
