"""``find_references``: ask every registered source at once, within one time bound."""
from __future__ import annotations

import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable

import httpx

from mcp_server.core.errors import InputError, redact_model
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.core.vocab import WarningCode
from mcp_server.refs.cache import RefCache
from mcp_server.refs.common import SearchParams
from mcp_server.refs.github import search_github, search_url
from mcp_server.refs.jira_src import browse_url, build_jql, search_jira
from mcp_server.refs.localgit import code_search_url, search_local
from mcp_server.refs.models import Outcome, ReferenceResult, RefItem, RefSection
from mcp_server.refs.registry import SourceSpec, load_registry
from mcp_server.refs.requests import FindReferencesRequest

DEFAULT_SOURCE_TIMEOUT_S = 15.0
KEYWORD_MAX = 128

_ENGINES: dict[str, Callable[[SourceSpec, SearchParams], RefSection]] = {
    "github-prs": search_github,
    "local-git": search_local,
    "jira": search_jira,
}
_LIVE = {"live:gh", "live:rest", "live:jira", "local:git"}


def _fallback(spec: SourceSpec, p: SearchParams, why: str) -> RefSection:
    url: str | None = None
    query: str | None = None
    if spec.kind == "github-prs":
        url = search_url(spec, p)
    elif spec.kind == "local-git":
        url = code_search_url(spec, p.keyword)
    elif spec.kind == "jira":
        query = build_jql(spec, p.keyword, p.days)
        server = (os.environ.get(spec.env or "JIRA_SERVER") or "").strip()
        url = browse_url(server, query) if server.startswith(("http://", "https://")) else None
    return RefSection(source=spec.key, kind=spec.kind, method="url-only" if url else "unavailable",
                      degraded=True, reason=why, url=url, query=query)


def _mentions(item: RefItem, word: str) -> bool:
    text = " ".join(x for x in (item.title, item.subject, item.snippet, item.file) if x).lower()
    return word in text


@engine(FindReferencesRequest)
def find_references(req: FindReferencesRequest) -> ReferenceResult:
    """Find prior art for a kernel/op keyword in the sources of ``_shared/data-sources.md``.

    Sources run concurrently, each within the lesser of 15 s and ``timeout_s``; the call returns after at
    most ``timeout_s`` with whatever arrived. Each section says how it was obtained and, when degraded, why.
    ``category`` (given, or derived from the keyword with ``_shared/kernel_categories.csv``) lists hits that
    mention it first.
    """
    return search_references(req)


def search_references(req: FindReferencesRequest, *, transport: httpx.BaseTransport | None = None,
                      gh_path: str | None = None) -> ReferenceResult:
    """``find_references`` with an HTTP transport and a ``gh`` executable the request cannot name (tests hand in
    a mock transport and a stand-in ``gh``; ``gh_path=""`` never uses gh, None looks on PATH)."""
    t0 = time.monotonic()
    kw = _check_keyword(req.keyword)
    reg = load_registry(req.registry)
    specs = reg.select(req.sources)
    if not specs:
        raise InputError("no enabled sources", path=reg.path, hint="enable a row or name sources with --sources")
    category, cat_source = _ranking_category(kw, req.category)
    # a source's own budget ends a little before the overall bound, so its own reason
    # (which fallback timed out, what was kept) arrives rather than a bare "no answer"
    per_source = min(DEFAULT_SOURCE_TIMEOUT_S, req.timeout_s * 0.85)
    cache = RefCache(enabled=not req.no_cache)
    params = SearchParams(keyword=kw, max_results=req.max_results, days=req.days, timeout_s=per_source,
                          cache=cache, transport=transport, gh_path=gh_path)
    results, warnings = _ask_sources(specs, params, req.timeout_s, t0)
    sections, section_warnings = _sections(specs, results, category)
    warnings += section_warnings
    outcomes = _outcomes(sections)
    unanswered = [s.source for s in sections if s.method not in _LIVE or s.incomplete]
    res = ReferenceResult(
        keyword=kw, category=category, category_source=cat_source, outcomes=outcomes, unanswered=unanswered,
        sections=sections,
        registry=reg.path, elapsed_s=round(time.monotonic() - t0, 3), timeout_s=req.timeout_s,
        warnings=warnings,
    )
    # what the sources sent back (titles, URLs such as a GitHub html_url, an error body that echoes
    # headers) is redacted in the result itself, not only in the cache copy
    return redact_model(res)


def _check_keyword(keyword: str) -> str:
    """The keyword with runs of whitespace collapsed; ``InputError`` when it is empty, too long to be an op name,
    or holds control characters (the request bounds the rest)."""
    kw = " ".join(keyword.split())
    if not kw:
        raise InputError("keyword is empty", hint="give a kernel or op name such as fused_moe or rmsnorm")
    if len(kw) > KEYWORD_MAX:
        raise InputError(f"keyword is {len(kw)} characters (at most {KEYWORD_MAX})",
                         hint="search for the op name (e.g. moe_sorting), not a full mangled kernel name")
    if any(ord(c) < 32 for c in kw):
        raise InputError("keyword contains control characters")
    return kw


def _ranking_category(kw: str, category: str | None) -> tuple[str | None, str | None]:
    """(category, how it was obtained: 'given' | 'classified' | None) used to rank hits."""
    if category:
        return category.strip().lower(), "given"
    try:
        from mcp_server.core.categories import DEFAULT_CATEGORY, load_categories

        derived = load_categories(None).classify(kw)
        if derived and derived != DEFAULT_CATEGORY:
            return derived, "classified"
    except Exception:  # categories are a ranking aid only; never fail the search for them
        pass
    return None, None


def _ask_sources(specs: list[SourceSpec], params: SearchParams, timeout_s: float,
                 t0: float) -> tuple[dict[str, RefSection], list[Warning_]]:
    """Every source concurrently; a source that fails or has not answered by ``timeout_s`` after
    ``t0`` gets its fallback section (a URL to look by hand) and a warning."""
    warnings: list[Warning_] = []
    pool = ThreadPoolExecutor(max_workers=len(specs), thread_name_prefix="refs")
    futures: dict[Future, SourceSpec] = {pool.submit(_ENGINES[s.kind], s, params): s for s in specs}
    results: dict[str, RefSection] = {}
    pending = set(futures)
    try:
        while pending:
            left = timeout_s - (time.monotonic() - t0)
            if left <= 0:
                break
            done, pending = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
            for fut in done:
                spec = futures[fut]
                try:
                    results[spec.key] = fut.result()
                except Exception as exc:  # a bug in one source must not lose the others
                    results[spec.key] = _fallback(spec, params, f"internal error ({type(exc).__name__})")
                    warnings.append(Warning_(code=WarningCode.source_error,
                                             message=f"{spec.key}: {type(exc).__name__}"))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    for fut in pending:
        spec = futures[fut]
        results[spec.key] = _fallback(spec, params, f"timeout: no answer within the {timeout_s:g}s bound")
        warnings.append(Warning_(code=WarningCode.timeout, message=f"{spec.key} gave no answer within {timeout_s:g}s"))
    return results, warnings


def _sections(specs: list[SourceSpec], results: dict[str, RefSection],
              category: str | None) -> tuple[list[RefSection], list[Warning_]]:
    """Sections in registry order, hits mentioning ``category`` first; warnings for partial answers."""
    sections: list[RefSection] = []
    warnings: list[Warning_] = []
    for spec in specs:
        sec = results[spec.key]
        if category and sec.items:
            word = category.lower()
            ranked = sorted(sec.items, key=lambda it: not _mentions(it, word))  # stable
            sec = sec.model_copy(update={"items": ranked})
        sections.append(sec)
        if sec.incomplete:
            warnings.append(Warning_(code=WarningCode.incomplete,
                                     message=f"{spec.key}: results may be partial ({sec.reason})"))
        if sec.rate_limit_reset:
            warnings.append(Warning_(code=WarningCode.rate_limited,
                                     message=f"{spec.key}: search limit resets at {sec.rate_limit_reset}"))
    return sections, warnings


def _outcomes(sections: list[RefSection]) -> list[Outcome]:
    """What was found: upstream_pr / local_hit / jira_ticket, else nothing_found (every source
    answered live and completely) or unknown."""
    found: dict[str, Outcome] = {"github-prs": "upstream_pr", "local-git": "local_hit", "jira": "jira_ticket"}
    outcomes = [o for kind, o in found.items() if any(s.items for s in sections if s.kind == kind)]
    if not outcomes:
        all_live = all(s.method in _LIVE and not s.incomplete for s in sections)
        outcomes.append("nothing_found" if all_live else "unknown")
    return outcomes
