"""Request model of find_references (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from mcp_server.core.argbounds import LIST_ITEMS, NAME_CHARS, PATH_CHARS, item_bounds
from mcp_server.core.operation import SizedRequest


class FindReferencesRequest(SizedRequest):
    keyword: str = Field(min_length=1, max_length=NAME_CHARS, description=(
        "Kernel or op keyword, e.g. moe_sorting, ck_gemm, fused_moe, rmsnorm, mla"))
    category: Optional[str] = Field(default=None, max_length=NAME_CHARS, description=(
        "Kernel category (e.g. moe, gemm); hits mentioning it come first. Default: classified from the keyword"))
    sources: Optional[list[str]] = Field(default=None, max_length=LIST_ITEMS, description=(
        "Registry keys to search (default: every enabled source in data-sources.md)"))
    max_results: int = Field(default=10, ge=1, le=100, description="Hits per source")
    days: Optional[int] = Field(default=None, ge=1, description="Only work updated in the last N days")
    timeout_s: float = Field(default=20.0, gt=0, le=300, description="Bound on the whole search in seconds")
    no_cache: bool = Field(default=False, description="Ignore and do not write the on-disk cache")
    registry: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "Reference-source registry file (default data-sources.md)"))

    check_items = item_bounds("sources", chars=NAME_CHARS)  # type: ignore[pydantic-field]
