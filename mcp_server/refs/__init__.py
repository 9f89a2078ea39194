"""Reference finder: prior art for a kernel/op keyword in GitHub PRs, local checkouts and Jira.

``find_references`` is imported on first use: listing the operations (every CLI start) imports
``refs.models`` and must not pay for the HTTP client the finder imports.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_server.core.lazy import lazy_names
from mcp_server.refs.models import ReferenceResult, RefItem, RefSection

if TYPE_CHECKING:
    from mcp_server.refs.finder import find_references

__all__ = ["find_references", "RefItem", "RefSection", "ReferenceResult"]
__getattr__ = lazy_names(__name__, {"find_references": "finder"}, globals())
