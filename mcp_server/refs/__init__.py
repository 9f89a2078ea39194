"""Reference finder: prior art for a kernel/op keyword in GitHub PRs, local checkouts and Jira.

``find_references`` is imported on first use: listing the operations (every CLI start) imports
``refs.models`` and must not pay for the HTTP client the finder imports.
"""
from __future__ import annotations

from typing import Any

from mcp_server.refs.models import ReferenceResult, RefItem, RefSection

__all__ = ["find_references", "RefItem", "RefSection", "ReferenceResult"]


def __getattr__(name: str) -> Any:
    if name == "find_references":
        from mcp_server.refs.finder import find_references

        return find_references
    raise AttributeError(f"module 'mcp_server.refs' has no attribute {name!r}")
