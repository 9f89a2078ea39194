"""Pull requests of a GitHub repository that mention a keyword.

Order of preference: ``gh search prs`` (installed and logged in) -> the REST search API through
httpx (``GITHUB_TOKEN``/``GH_TOKEN`` optional) -> the search link only. One request per call,
never a retry loop; a rate-limit answer is remembered (reset time in the cache directory) so
later calls do not ask again before the reset.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from urllib.parse import quote_plus, urlparse

import httpx

from mcp_server.core import proc
from mcp_server.refs.common import SearchParams, Stopwatch, iso_utc, short
from mcp_server.refs.models import RefItem, RefSection
from mcp_server.refs.registry import SourceSpec

SEARCH_Q_MAX = 256  # GitHub search: queries longer than 256 characters are rejected
PER_PAGE_MAX = 100
GH_JSON_FIELDS = "number,title,url,state,updatedAt,isDraft"


def api_base() -> str:
    return (os.environ.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/")


def web_base() -> str:
    return (os.environ.get("GITHUB_SERVER_URL") or "https://github.com").rstrip("/")


def search_terms(keyword: str) -> str:
    """The keyword as GitHub search terms: quotes removed, a phrase quoted."""
    kw = " ".join(keyword.replace('"', " ").split())
    # a phrase, or a word that GitHub would read as a qualifier (repo:x), is searched as quoted text
    return f'"{kw}"' if (" " in kw or ":" in kw) else kw


def _updated(p: SearchParams) -> str:
    """The search qualifier for the time window (none without one)."""
    since = p.since_date()
    return f" updated:>={since}" if since else ""


def build_query(spec: SourceSpec, p: SearchParams) -> str:
    return f"{search_terms(p.keyword)} repo:{spec.repo} is:pr{_updated(p)}"


def search_url(spec: SourceSpec, p: SearchParams) -> str:
    q = f"is:pr {search_terms(p.keyword)}{_updated(p)}"
    return f"{web_base()}/{spec.repo}/pulls?q={quote_plus(q)}"


def search_github(spec: SourceSpec, p: SearchParams) -> RefSection:
    sw = Stopwatch()
    q = build_query(spec, p)
    n = max(1, min(int(p.max_results), PER_PAGE_MAX))
    url = search_url(spec, p)
    base = dict(source=spec.key, kind=spec.kind, query=q, url=url)
    cache_parts = ("github", spec.repo, q, n)
    hit = p.cache.get(spec.key, *cache_parts)
    if hit is not None:
        try:
            cached = RefSection.model_validate(hit)
            return cached.model_copy(update={"cached": True, "elapsed_s": sw.elapsed()})
        except ValueError:
            pass
    if len(q) > SEARCH_Q_MAX:
        return RefSection(**base, method="url-only", degraded=True, elapsed_s=sw.elapsed(),
                          reason=f"query longer than GitHub's {SEARCH_Q_MAX}-character search limit; shorten the "
                                 "keyword")

    notes: list[str] = []
    gh = _find_gh(p.gh_path)
    if gh is None:
        notes.append("gh not installed" if p.gh_path is None else "gh disabled")
    else:
        sec, why = _via_gh(gh, spec, p, n, q, url, sw)
        if sec is not None:
            p.cache.put(spec.key, *cache_parts, value=sec.model_dump(mode="json"))
            return sec
        notes.append(why)

    sec, why = _via_rest(spec, p, n, q, url, sw, notes)
    if sec is not None:
        if sec.method == "live:rest":
            p.cache.put(spec.key, *cache_parts, value=sec.model_dump(mode="json"))
        return sec
    notes.append(why)
    return RefSection(**base, method="url-only", degraded=True, reason="; ".join(notes), elapsed_s=sw.elapsed())


# --------------------------------------------------------------------------- gh


def _find_gh(gh_path: str | None) -> str | None:
    if gh_path == "":
        return None
    if gh_path:
        return gh_path if os.path.isfile(gh_path) and os.access(gh_path, os.X_OK) else None
    return shutil.which("gh")


def _via_gh(gh: str, spec: SourceSpec, p: SearchParams, n: int, q: str, url: str,
            sw: Stopwatch) -> tuple[RefSection | None, str]:
    env = dict(os.environ, GH_PROMPT_DISABLED="1", NO_COLOR="1", GH_NO_UPDATE_NOTIFIER="1")
    left = sw.left(p.timeout_s)
    try:
        st = proc.run([gh, "auth", "status"], timeout=min(5.0, max(left * 0.3, 0.2)), env=env)
    except OSError as exc:
        return None, f"gh could not start ({type(exc).__name__})"
    if st.timed_out:
        return None, "gh auth status timed out"
    if st.rc != 0:
        return None, "gh not authenticated (run `gh auth login` or set GH_TOKEN)"
    args = [gh, "search", "prs", "--repo", spec.repo or "", "--limit", str(n), "--sort", "updated",
            "--order", "desc", "--json", GH_JSON_FIELDS]
    since = p.since_date()
    if since:
        args += ["--updated", f">={since}"]
    args += ["--", search_terms(p.keyword)]
    left = sw.left(p.timeout_s)
    if left <= 0.1:
        return None, "gh: no time left"
    try:
        r = proc.run(args, timeout=left, env=env)
    except OSError as exc:
        return None, f"gh could not start ({type(exc).__name__})"
    if r.timed_out:
        return None, f"gh search timed out after {p.timeout_s:.1f}s"
    if r.rc != 0:
        msg = short(r.stderr, 160) or f"exit status {r.rc}"
        if "rate limit" in msg.lower():
            return None, f"gh: rate limited ({msg})"
        return None, f"gh search failed: {msg}"
    try:
        rows = json.loads(r.stdout or "[]")
        if not isinstance(rows, list):
            raise ValueError("not a list")
        items = [_gh_item(row) for row in rows[:n]]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None, "gh returned malformed JSON"
    return RefSection(source=spec.key, kind=spec.kind, method="live:gh", degraded=False, query=q, url=url,
                      items=items, elapsed_s=sw.elapsed()), ""


def _gh_item(row: dict) -> RefItem:
    state = str(row.get("state") or "").lower() or None
    if row.get("isDraft") and state == "open":
        state = "draft"
    num = row.get("number")
    return RefItem(kind="pr", id=f"#{num}" if num is not None else None, title=short(row.get("title"), 300),
                   url=row.get("url"), state=state, updated=row.get("updatedAt"))


# --------------------------------------------------------------------------- REST


def _via_rest(spec: SourceSpec, p: SearchParams, n: int, q: str, url: str, sw: Stopwatch,
              notes: list[str]) -> tuple[RefSection | None, str]:
    token = os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN")
    mode = "token" if token else "anon"
    limit_name = f"github-{urlparse(api_base()).hostname or 'api'}-{mode}"
    until = p.cache.limited_until(limit_name)
    base = dict(source=spec.key, kind=spec.kind, query=q, url=url)
    if until is not None:
        why = (f"REST: rate limited until {iso_utc(until)} "
               "(remembered from an earlier answer; not asked again before then)")
        return RefSection(**base, method="url-only", degraded=True, reason="; ".join([*notes, why]),
                          rate_limit_reset=iso_utc(until), elapsed_s=sw.elapsed()), ""
    left = sw.left(p.timeout_s)
    if left <= 0.1:
        return None, "REST: no time left"
    headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
               "User-Agent": "kernelscope-find-references"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    params = {"q": q, "per_page": str(n), "sort": "updated", "order": "desc"}
    try:
        with httpx.Client(transport=p.transport, timeout=httpx.Timeout(left), headers=headers,
                          follow_redirects=False) as client:
            r = client.get(f"{api_base()}/search/issues", params=params)
    except httpx.TimeoutException:
        return None, f"REST: timeout after {p.timeout_s:.1f}s"
    except (httpx.ConnectError, httpx.NetworkError) as exc:
        return None, f"REST: offline (cannot reach {urlparse(api_base()).hostname}: {type(exc).__name__})"
    except httpx.HTTPError as exc:
        return None, f"REST: request failed ({type(exc).__name__})"

    reset = _reset_epoch(r)
    remaining = r.headers.get("x-ratelimit-remaining")
    if r.status_code == 200:
        if remaining == "0" and reset:
            p.cache.remember_limit(limit_name, reset)
        try:
            data = r.json()
            raw_items = data["items"]
            if not isinstance(raw_items, list):
                raise TypeError("items is not a list")
            items = [_rest_item(it) for it in raw_items[:n]]
            total = data.get("total_count")
            incomplete = bool(data.get("incomplete_results", False))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None, "REST: malformed JSON in GitHub's answer"
        reasons = list(notes)
        if not token:
            reasons.append("anonymous REST search (no GITHUB_TOKEN: 10 searches/min)")
        if incomplete:
            reasons.append("GitHub reported incomplete_results (search timed out on its side; results may be partial)")
        return RefSection(**base, method="live:rest", degraded=True, reason="; ".join(reasons) or None,
                          items=items, total=total if isinstance(total, int) else None, incomplete=incomplete,
                          rate_limit_reset=iso_utc(reset) if (remaining == "0" and reset) else None,
                          elapsed_s=sw.elapsed()), ""

    msg = _message(r)
    limited = remaining == "0" or "rate limit" in msg.lower() or r.headers.get("retry-after")
    if r.status_code in (403, 429) and limited:
        if reset is None:
            reset = time.time() + 60.0
        p.cache.remember_limit(limit_name, reset)
        hint = "" if token else "; set GITHUB_TOKEN for a higher limit"
        why = f"REST: rate limited until {iso_utc(reset)} (HTTP {r.status_code}{hint})"
        return RefSection(**base, method="url-only", degraded=True, reason="; ".join([*notes, why]),
                          rate_limit_reset=iso_utc(reset), elapsed_s=sw.elapsed()), ""
    if r.status_code == 401:
        return None, "REST: auth failed (HTTP 401: GitHub rejected the token in GITHUB_TOKEN/GH_TOKEN)"
    if r.status_code == 422:
        return None, f"REST: query rejected (HTTP 422: {msg or 'validation failed'})"
    if r.status_code == 403:
        return None, f"REST: forbidden (HTTP 403: {msg or 'no message'})"
    return None, f"REST: HTTP {r.status_code}" + (f" ({msg})" if msg else "")


def _reset_epoch(r: httpx.Response) -> float | None:
    # x-ratelimit-reset: epoch seconds; retry-after: seconds from now
    for header, offset in (("x-ratelimit-reset", 0.0), ("retry-after", time.time())):
        try:
            return float(r.headers[header]) + offset
        except (KeyError, ValueError):
            pass
    return None


def _message(r: httpx.Response) -> str:
    try:
        data = r.json()
        if isinstance(data, dict):
            msg = str(data.get("message") or "")
            errs = data.get("errors")
            if isinstance(errs, list) and errs:
                first = errs[0]
                detail = first.get("message") if isinstance(first, dict) else str(first)
                if detail:
                    msg = f"{msg}: {detail}" if msg else str(detail)
            return short(msg, 200)
    except ValueError:
        pass
    return short(r.text, 120)


def _rest_item(it: dict) -> RefItem:
    state = it.get("state")
    pr = it.get("pull_request") or {}
    if isinstance(pr, dict) and pr.get("merged_at"):
        state = "merged"
    elif it.get("draft") and state == "open":
        state = "draft"
    num = it.get("number")
    return RefItem(kind="pr" if pr else "issue", id=f"#{num}" if num is not None else None,
                   title=short(it.get("title"), 300), url=it.get("html_url"), state=state,
                   updated=it.get("updated_at"))
