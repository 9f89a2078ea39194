"""Prior art in a local git checkout: commit messages, changes and current files.

The checkout comes from the registry row's ``env`` variable (e.g. ``AITER_ROOT``), else from the
location of an importable ``package``, else from common places (``~/<name>`` ...). Three
searches, each bounded: ``git log -i -F --grep`` (messages), ``git grep -n -i -F`` (files at
HEAD), ``git log -S`` (changes adding/removing the keyword; the slowest, given what time is left).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from urllib.parse import quote_plus

from mcp_server.core import proc
from mcp_server.refs.common import SearchParams, Stopwatch, short
from mcp_server.refs.github import search_terms, web_base
from mcp_server.refs.models import RefItem, RefSection
from mcp_server.refs.registry import SourceSpec

COMMON_PARENTS = ("~", "~/src", "~/code", "~/work", "~/git", "/workspace", "/sgl-workspace")
SEP = "\x1f"


def code_search_url(spec: SourceSpec, keyword: str) -> str | None:
    if not spec.repo:
        return None
    return f"{web_base()}/search?type=code&q={quote_plus(f'repo:{spec.repo} {search_terms(keyword)}')}"


def _toplevel(path: Path, timeout: float) -> str | None:
    if not path.is_dir():
        return None
    r = proc.git(path, "rev-parse", "--show-toplevel", timeout=timeout)  # nothing the repository configures runs
    if r.rc == 0 and r.stdout.strip():
        return r.stdout.strip()
    return None


def find_checkout(spec: SourceSpec, timeout: float = 3.0) -> tuple[str | None, str]:
    """(root, how) or (None, why not)."""
    if spec.env:
        val = os.environ.get(spec.env)
        if val:
            root = _toplevel(Path(val).expanduser(), timeout)
            if root is None:
                return None, f"{spec.env} does not name a git checkout"  # the value is never shown
            return root, f"from {spec.env}"
    if spec.package:
        try:
            found = importlib.util.find_spec(spec.package)
        except (ImportError, ValueError):
            found = None
        locs = []
        if found is not None:
            if found.origin and found.origin not in ("namespace", "built-in"):
                locs.append(Path(found.origin).parent)
            locs.extend(Path(x) for x in (found.submodule_search_locations or []))
        for loc in locs:
            if {"site-packages", "dist-packages"} & set(loc.parts):
                continue  # an installed copy, not a clone: its git root would be the wrong repository
            root = _toplevel(loc, timeout)
            if root:
                return root, f"from the importable package {spec.package}"
    name = spec.repo_name or spec.package or spec.key
    for parent in COMMON_PARENTS:
        cand = Path(parent).expanduser() / name
        if (cand / ".git").exists():
            root = _toplevel(cand, timeout)
            if root:
                return root, f"found at {cand}"
    tried = [f"${spec.env}" if spec.env else None, f"package {spec.package}" if spec.package else None,
             f"~/{name} and other common places"]
    return None, "no checkout (" + ", ".join(t for t in tried if t) + ")"


def search_local(spec: SourceSpec, p: SearchParams) -> RefSection:
    sw = Stopwatch()
    url = code_search_url(spec, p.keyword)
    kw = " ".join(p.keyword.split())
    base = dict(source=spec.key, kind=spec.kind, query=kw, url=url)
    if shutil.which("git") is None:
        return RefSection(**base, method="url-only" if url else "unavailable", degraded=True,
                          reason="git not installed", elapsed_s=sw.elapsed())
    root, how = find_checkout(spec, timeout=min(3.0, max(p.timeout_s * 0.2, 0.2)))
    if root is None:
        return RefSection(**base, method="url-only" if url else "unavailable", degraded=True,
                          reason=how, elapsed_s=sw.elapsed())
    n = max(1, int(p.max_results))
    since = [f"--since={int(p.days)}.days.ago"] if p.days else []
    fmt = f"--format=%H{SEP}%cI{SEP}%s"
    items: list[RefItem] = []
    partial: list[str] = []
    seen: set[str] = set()

    def log(args: list[str], match: str, label: str) -> None:
        left = sw.left(p.timeout_s)
        if left <= 0.1:
            partial.append(f"{label} skipped (no time left)")
            return
        r = proc.git(root, "log", "--no-color", "--no-textconv", "--no-ext-diff", f"-n{n}", fmt, *since, *args,
                     timeout=left)
        if r.timed_out:
            partial.append(f"{label} timed out")
            return
        if r.rc != 0:
            partial.append(f"{label} failed: {short(r.stderr, 120)}")
            return
        for line in r.stdout.splitlines():
            parts = line.split(SEP)
            if len(parts) != 3 or parts[0] in seen:
                continue
            seen.add(parts[0])
            items.append(RefItem(kind="commit", commit=parts[0], updated=parts[1], subject=short(parts[2], 300),
                                 match=match))

    log(["-i", "-F", f"--grep={kw}"], "message", "git log --grep")

    left = sw.left(p.timeout_s)
    if left > 0.1:
        r = proc.git(root, "grep", "--no-color", "--no-textconv", "-n", "-i", "-F", "-I", "-e", kw, timeout=left)
        if r.timed_out:
            partial.append("git grep timed out")
        elif r.rc not in (0, 1):  # 1: no match
            partial.append(f"git grep failed: {short(r.stderr, 120)}")
        else:
            count = 0
            for line in r.stdout.splitlines():
                path, _, rest = line.partition(":")
                lno, _, text = rest.partition(":")
                if not lno.isdigit():
                    continue
                count += 1
                if count <= n:
                    items.append(RefItem(kind="file", file=path, line=int(lno), snippet=short(text, 200)))
            if count > n:
                partial.append(f"git grep: {count} matching lines, first {n} shown")
    else:
        partial.append("git grep skipped (no time left)")

    log([f"-S{kw}"], "diff", "git log -S")

    head = proc.git(root, "rev-parse", "--short", "HEAD", timeout=2.0)
    note = f"checkout {how}" + (f", HEAD {head.stdout.strip()}" if head.rc == 0 else "")
    incomplete = any("timed out" in x or "skipped" in x or "failed" in x for x in partial)
    return RefSection(**base, method="local:git", degraded=incomplete, root=root, items=items,
                      incomplete=incomplete, reason="; ".join([note, *partial]), elapsed_s=sw.elapsed())
