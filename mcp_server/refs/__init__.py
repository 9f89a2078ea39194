"""Reference finder: prior art for a kernel/op keyword in GitHub PRs, local checkouts and Jira."""
from __future__ import annotations

from mcp_server.refs.finder import find_references
from mcp_server.refs.models import ReferenceResult, RefItem, RefSection

__all__ = ["find_references", "RefItem", "RefSection", "ReferenceResult"]
