"""Result model of ``find_references`` (the MCP tool's output schema and the CLI's ``--json``)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from mcp_server.core.models import Model, Warning_

Method = Literal["live:gh", "live:rest", "live:jira", "local:git", "url-only", "unavailable"]
ItemKind = Literal["pr", "issue", "ticket", "commit", "file"]
Outcome = Literal["upstream_pr", "local_hit", "jira_ticket", "nothing_found", "unknown"]


class RefItem(Model):
    """One hit. Remote hits fill id/title/url/state/updated; local commits fill commit/subject;
    local file hits fill file/line/snippet."""

    kind: ItemKind
    id: Optional[str] = Field(None, description="PR number (#123) or Jira key (ABC-1)")
    title: Optional[str] = None
    url: Optional[str] = None
    state: Optional[str] = Field(None, description="open / closed / merged / draft, or the Jira status name")
    updated: Optional[str] = Field(None, description="last update (ISO 8601) as the source reports it")
    commit: Optional[str] = Field(None, description="full commit hash (local git)")
    subject: Optional[str] = Field(None, description="commit subject line (local git)")
    match: Optional[str] = Field(None, description="how a local commit matched: 'message' (git log --grep) or 'diff' "
                                                   "(git log -S)")
    file: Optional[str] = Field(None, description="path inside the checkout (git grep)")
    line: Optional[int] = None
    snippet: Optional[str] = None


class RefSection(Model):
    """What one registered source gave, and how it was obtained."""

    source: str = Field(description="registry key, e.g. aiter-upstream")
    kind: str = Field(description="registry kind: github-prs, local-git or jira")
    method: Method = Field(description="live:gh, live:rest, live:jira, local:git, url-only (only a link to run the "
                                       "search by hand) or unavailable")
    degraded: bool = Field(description="true when the preferred way did not answer")
    reason: Optional[str] = Field(None, description="why degraded: no token, rate limited until ..., timeout, offline, "
                                                    "not installed, auth failed ...")
    url: Optional[str] = Field(None, description="the search as a link a person can open (always given when known)")
    query: Optional[str] = Field(None, description="the query sent (GitHub q / JQL / git pattern)")
    root: Optional[str] = Field(None, description="local checkout searched (local-git)")
    items: list[RefItem] = Field(default_factory=list)
    total: Optional[int] = Field(None, description="total matches the source reports (may exceed len(items))")
    incomplete: bool = Field(False, description="the source said its results are incomplete (GitHub "
                                                "incomplete_results, a partial local search)")
    rate_limit_reset: Optional[str] = Field(None, description="when the GitHub search limit resets (ISO 8601 UTC), "
                                                              "when known")
    cached: bool = Field(False, description="served from the on-disk cache")
    elapsed_s: float = 0.0


class ReferenceResult(Model):
    """Prior art for a kernel/op keyword across the registered sources."""

    keyword: str
    category: Optional[str] = None
    category_source: Optional[Literal["given", "classified"]] = Field(
        None, description="'classified' when the category came from _shared/kernel_categories.csv")
    outcomes: list[Outcome] = Field(
        description="upstream_pr (cherry-pick candidate), local_hit (dispatch/wiring), jira_ticket (coordinate), "
        "nothing_found (every source answered live with no hit: new work), unknown (no hit but some source was "
        "degraded)")
    unanswered: list[str] = Field(
        default_factory=list,
        description="keys of sources that gave no live answer (url-only / unavailable / incomplete): their silence is "
                    "not a 'no'")
    sections: list[RefSection]
    registry: str = Field(description="the data-sources registry used")
    elapsed_s: float
    timeout_s: float
    warnings: list[Warning_] = Field(default_factory=list)
