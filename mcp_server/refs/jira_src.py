"""Jira tickets mentioning a keyword, through the ``jira`` library.

Credentials: ``JIRA_EMAIL`` + ``JIRA_API_TOKEN`` (Jira Cloud, basic auth) or ``JIRA_PAT``
(Server / Data Center, bearer token); the site URL comes from the registry row's ``env``
(default ``JIRA_SERVER``). The client gets a timeout, no retries and no update check. The
library's own error text carries request headers, so it is never shown: only the status code
and the server's error messages are.
"""
from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

from mcp_server.refs.common import SearchParams, Stopwatch, short
from mcp_server.refs.models import RefItem, RefSection
from mcp_server.refs.registry import SourceSpec

FIELDS = ["summary", "status", "updated", "issuetype"]


def jql_escape(text: str) -> str:
    """A JQL string literal body: backslashes and double quotes escaped, whitespace collapsed."""
    t = " ".join(str(text).split())
    return t.replace("\\", "\\\\").replace('"', '\\"')


def build_jql(spec: SourceSpec, keyword: str, days: int | None) -> str:
    parts = []
    if spec.jql_project:
        parts.append(f'project = "{jql_escape(spec.jql_project)}"')
    parts.append(f'text ~ "{jql_escape(keyword)}"')
    if days:
        parts.append(f"updated >= -{int(days)}d")
    return " AND ".join(parts) + " ORDER BY updated DESC"


def browse_url(server: str, jql: str) -> str:
    return f"{server.rstrip('/')}/issues/?jql={quote(jql, safe='')}"


def search_jira(spec: SourceSpec, p: SearchParams) -> RefSection:
    sw = Stopwatch()
    env_name = spec.env or "JIRA_SERVER"
    server = (os.environ.get(env_name) or "").strip().rstrip("/")
    jql = build_jql(spec, p.keyword, p.days)
    unusable = (f"{env_name} not set (the Jira site URL)" if not server else
                "" if server.startswith(("http://", "https://")) else f"{env_name} is not an http(s) URL")
    if unusable:
        return RefSection(source=spec.key, kind=spec.kind, method="unavailable", degraded=True, query=jql,
                          reason=unusable, elapsed_s=sw.elapsed())
    base = dict(source=spec.key, kind=spec.kind, query=jql, url=browse_url(server, jql))

    def degraded(why: str) -> RefSection:
        return RefSection(**base, method="url-only", degraded=True, reason=why, elapsed_s=sw.elapsed())

    n = max(1, min(int(p.max_results), 100))
    creds = _credentials()
    if isinstance(creds, str):
        return degraded(creds)
    auth, auth_kind = creds
    cache_parts = ("jira", server, jql, n, auth_kind)
    hit = p.cache.get(spec.key, *cache_parts)
    if hit is not None:
        try:
            return RefSection.model_validate(hit).model_copy(update={"cached": True, "elapsed_s": sw.elapsed()})
        except ValueError:
            pass
    data, why = _fetch(server, auth, auth_kind, jql, n, sw, p.timeout_s, env_name)
    if why:
        return degraded(why)
    if not isinstance(data, dict) or not isinstance(data.get("issues"), list):
        return degraded("malformed answer from the Jira site (no issues list)")
    items = []
    for it in data["issues"][:n]:
        if not isinstance(it, dict) or not it.get("key"):
            continue
        f = it.get("fields") or {}
        status = (f.get("status") or {}).get("name") if isinstance(f.get("status"), dict) else None
        items.append(RefItem(kind="ticket", id=str(it["key"]), title=short(f.get("summary"), 300),
                             url=f"{server}/browse/{it['key']}", state=status, updated=f.get("updated")))
    total = data.get("total")
    sec = RefSection(**base, method="live:jira", degraded=False, items=items,
                     total=total if isinstance(total, int) else None, elapsed_s=sw.elapsed())
    p.cache.put(spec.key, *cache_parts, value=sec.model_dump(mode="json"))
    return sec


def _credentials() -> tuple[dict, str] | str:
    """(the client's auth argument, the variables it came from), else why there is none."""
    email, api_token, pat = (os.environ.get(k) or "" for k in ("JIRA_EMAIL", "JIRA_API_TOKEN", "JIRA_PAT"))
    if pat:
        return {"token_auth": pat}, "JIRA_PAT"
    if email and api_token:
        return {"basic_auth": (email, api_token)}, "JIRA_EMAIL/JIRA_API_TOKEN"
    if api_token and not email:
        return "JIRA_API_TOKEN is set but JIRA_EMAIL is not (Cloud basic auth needs both)"
    return "no credentials (set JIRA_EMAIL and JIRA_API_TOKEN for Jira Cloud, or JIRA_PAT for Server/Data Center)"


def _fetch(server: str, auth: dict, auth_kind: str, jql: str, n: int, sw: Stopwatch, timeout_s: float,
           env_name: str) -> tuple[Any, str]:
    """(the search's JSON answer, '') or (None, why there is none): the status code and the server's
    messages, never the library's error text (it carries the request headers)."""
    try:
        import requests
        from jira import JIRA, JIRAError
    except ImportError:
        return None, "the jira library is not installed"
    left = sw.left(timeout_s)
    if left <= 0.1:
        return None, "no time left"
    client = None
    try:
        # up to three requests (serverInfo, field, search) share the budget; the search gets most of it
        client = JIRA(server=server, **auth, timeout=max(left / 2, 0.2), max_retries=0, logging=False,
                      get_server_info=True, options={"check_update": False, "verify": True})
        return client.search_issues(jql, maxResults=n, fields=list(FIELDS), json_result=True), ""
    except JIRAError as exc:
        code, text = getattr(exc, "status_code", None), getattr(exc, "text", None)
        return None, (f"auth failed (HTTP {code}: the site rejected {auth_kind})" if code in (401, 403) else
                      f"JQL rejected (HTTP 400: {short(text or '', 200)})" if code == 400 else
                      "rate limited by the Jira site (HTTP 429)" if code == 429 else
                      f"Jira error HTTP {code}" + (f": {short(text, 160)}" if text else ""))
    except requests.exceptions.Timeout:
        return None, f"timeout after {timeout_s:.1f}s"
    except requests.exceptions.ConnectionError:
        return None, f"offline (cannot reach the site in {env_name})"  # the value is never shown
    except requests.exceptions.RequestException as exc:
        return None, f"request failed ({type(exc).__name__})"
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"malformed answer from the Jira site ({type(exc).__name__})"
    finally:
        if client is not None:
            try:
                client.close()
            except Exception:
                pass
