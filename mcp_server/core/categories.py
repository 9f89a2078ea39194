"""The one kernel-category loader and classifier.

``_shared/kernel_categories.csv`` holds ``category,pattern`` rows. Each pattern
is a case-insensitive regular expression (usually an alternation; Python syntax,
matched in linear time by RE2 through ``mcp_server.core.userregex``). Rules are
tried in file order; the first whose pattern is found anywhere in the kernel
name wins; a name no rule matches is ``other``. Users edit the CSV; every
engine that needs a category calls ``load_categories`` (cached per file
content) and ``CategoryRules.classify``.

Some category names are reserved (``mcp_server.core.vocab.RESERVED_CATEGORIES``):
the engines rely on them (``communication`` drives trace layer cuts and the
communication block). ``CategoryRules.reserved_warnings()`` returns a
``reserved_category_missing`` warning when the CSV no longer defines one.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from mcp_server.core.models import Warning_
from mcp_server.core.paths import shared_path
from mcp_server.core.rules import parse_rule_table, read_rules_file
from mcp_server.core.userregex import UserRegex
from mcp_server.core.vocab import OTHER, WarningCode, missing_reserved_categories, reserved_category_message

DEFAULT_CATEGORY = OTHER


@dataclass(frozen=True)
class CategoryRule:
    category: str
    pattern: str
    regex: UserRegex = field(compare=False, repr=False)


@dataclass
class CategoryRules:
    """Ordered rules; ``classify`` memoises per unique name."""

    rules: tuple[CategoryRule, ...]
    source: str
    sha256: str
    _memo: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def classify(self, name: str) -> str:
        hit = self._memo.get(name)
        if hit is not None:
            return hit
        cat = DEFAULT_CATEGORY
        for rule in self.rules:
            if rule.regex.search(name):
                cat = rule.category
                break
        self._memo[name] = cat
        return cat

    @property
    def categories(self) -> list[str]:
        seen: dict[str, None] = {}
        for r in self.rules:
            seen.setdefault(r.category, None)
        seen.setdefault(DEFAULT_CATEGORY, None)
        return list(seen)

    def reserved_warnings(self) -> list[Warning_]:
        """A ``reserved_category_missing`` warning when a reserved category has no rule."""
        missing = missing_reserved_categories(r.category for r in self.rules)
        if not missing:
            return []
        return [Warning_(code=WarningCode.reserved_category_missing, count=len(missing),
                         message=reserved_category_message(missing, self.source))]


def parse_categories(text: str, source: str = "<string>") -> CategoryRules:
    """Parse categories CSV text; raises ``CategoriesError`` naming the line and the problem."""
    table = parse_rule_table(text, source, required=("category", "pattern"), what="category rules")
    rules = tuple(CategoryRule(r.values["category"], r.values["pattern"], r.regex) for r in table.rows)
    return CategoryRules(rules, source, table.sha256)


@lru_cache(maxsize=16)
def _parsed(source: str, text: str) -> CategoryRules:
    return parse_categories(text, source=source)  # cached so the per-name memo lives across calls


def load_categories(path: str | os.PathLike | None = None) -> CategoryRules:
    """Load rules from ``path`` or the shared default."""
    p = Path(path) if path else shared_path("kernel_categories.csv")
    text, resolved = read_rules_file(p, what="categories", hint="pass a CSV with header 'category,pattern'")
    return _parsed(resolved, text)
