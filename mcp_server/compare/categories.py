"""The one kernel-category loader and classifier.

``_shared/kernel_categories.csv`` holds ``category,pattern`` rows. Each pattern
is a case-insensitive regular expression (usually an alternation). Rules are
tried in file order; the first whose pattern is found anywhere in the kernel
name wins; a name no rule matches is ``other``. Users edit the CSV; every
engine that needs a category calls ``load_categories`` (cached per file
content) and ``CategoryRules.classify``.
"""
from __future__ import annotations

import csv
import hashlib
import io
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from mcp_server import shared_path
from mcp_server.errors import CategoriesError, FileMissingError

DEFAULT_CATEGORY = "other"


def default_categories_path() -> Path:
    return shared_path("kernel_categories.csv")


@dataclass(frozen=True)
class CategoryRule:
    category: str
    pattern: str
    regex: re.Pattern[str] = field(compare=False, repr=False)


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

    def classify_many(self, names) -> list[str]:
        return [self.classify(n) for n in names]

    @property
    def categories(self) -> list[str]:
        seen: dict[str, None] = {}
        for r in self.rules:
            seen.setdefault(r.category, None)
        seen.setdefault(DEFAULT_CATEGORY, None)
        return list(seen)


def parse_categories(text: str, source: str = "<string>") -> CategoryRules:
    """Parse categories CSV text; raises ``CategoriesError`` naming row and problem."""
    reader = csv.reader(io.StringIO(text))
    rows = [r for r in reader]
    if not rows:
        raise CategoriesError("categories file is empty; expected a header 'category,pattern'", path=source)
    header = [h.strip().lower() for h in rows[0]]
    if "category" not in header or "pattern" not in header:
        raise CategoriesError(
            f"header must name columns 'category' and 'pattern', found {rows[0]!r}", path=source
        )
    ci, pi = header.index("category"), header.index("pattern")
    rules: list[CategoryRule] = []
    for lineno, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row) or row[0].lstrip().startswith("#"):
            continue
        if len(row) <= max(ci, pi):
            raise CategoriesError(f"line {lineno}: expected 'category,pattern', got {row!r}", path=source)
        cat, pat = row[ci].strip(), row[pi].strip()
        if not cat or not pat:
            raise CategoriesError(f"line {lineno}: empty category or pattern", path=source)
        try:
            rx = re.compile(pat, re.IGNORECASE)
        except re.error as exc:
            raise CategoriesError(f"line {lineno}: bad regex for category {cat!r}: {exc}", path=source) from None
        rules.append(CategoryRule(cat, pat, rx))
    if not rules:
        raise CategoriesError("no rules found", path=source)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return CategoryRules(tuple(rules), source, digest)


@lru_cache(maxsize=16)
def _load_cached(path: str, mtime_ns: int, size: int) -> CategoryRules:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CategoriesError("categories file is not UTF-8 text", path=path) from None
    return parse_categories(text, source=path)


def load_categories(path: str | Path | None = None) -> CategoryRules:
    """Load rules from ``path`` or the shared default."""
    p = Path(path) if path else default_categories_path()
    if not p.exists():
        raise FileMissingError("categories file not found", path=p, hint="pass a CSV with header 'category,pattern'")
    if p.is_dir():
        raise FileMissingError("categories path is a directory, expected a CSV file", path=p)
    st = p.stat()
    rules = _load_cached(str(p.resolve()), st.st_mtime_ns, st.st_size)
    return rules
