"""Pieces shared by the reference sources."""
from __future__ import annotations

import datetime as _dt
import re
import time
from dataclasses import dataclass, field

import httpx

from mcp_server.core.errors import redact
from mcp_server.refs.cache import RefCache


@dataclass
class SearchParams:
    """What every source receives: the query and its own time budget."""

    keyword: str
    max_results: int = 10
    days: int | None = None
    timeout_s: float = 10.0
    cache: RefCache = field(default_factory=RefCache)
    transport: httpx.BaseTransport | None = None  # GitHub REST transport (tests: httpx.MockTransport)
    gh_path: str | None = None  # None: look on PATH; "": never use gh

    def since_date(self) -> str | None:
        if not self.days:
            return None
        d = _dt.datetime.now(_dt.timezone.utc).date() - _dt.timedelta(days=int(self.days))
        return d.isoformat()


def iso_utc(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def short(text: str | None, limit: int = 200) -> str:
    """One line, redacted, at most ``limit`` characters."""
    t = re.sub(r"\s+", " ", str(text or "")).strip()
    t = redact(t)
    return t if len(t) <= limit else t[: limit - 1] + "…"


class Stopwatch:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def left(self, budget: float) -> float:
        return budget - (time.monotonic() - self.t0)
