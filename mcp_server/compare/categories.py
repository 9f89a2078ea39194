"""Moved to ``mcp_server.categories`` (shared by every engine); kept as an alias for old imports."""
from mcp_server.categories import (  # noqa: F401
    DEFAULT_CATEGORY,
    CategoryRule,
    CategoryRules,
    default_categories_path,
    load_categories,
    parse_categories,
)
