"""Request model of find_references (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from mcp_server.core.argbounds import NameArg, NameList, PathArg
from mcp_server.core.operation import SizedRequest


class FindReferencesRequest(SizedRequest):
    keyword: NameArg = Field(min_length=1, description=(
        "Kernel or op keyword, e.g. moe_sorting, ck_gemm, fused_moe, rmsnorm, mla"))
    category: Optional[NameArg] = Field(default=None, description=(
        "Kernel category (e.g. moe, gemm); hits mentioning it come first. Default: classified from the keyword"))
    sources: Optional[NameList] = Field(default=None, description=(
        "Registry keys to search (default: every enabled source in data-sources.md)"))
    max_results: int = Field(default=10, ge=1, le=100, description="Hits per source")
    days: Optional[int] = Field(default=None, ge=1, description="Only work updated in the last N days")
    timeout_s: float = Field(default=20.0, gt=0, le=300, description="Bound on the whole search in seconds")
    no_cache: bool = Field(default=False, description="Ignore and do not write the on-disk cache")
    registry: Optional[PathArg] = Field(default=None, description=(
        "Reference-source registry file (default data-sources.md)"))
