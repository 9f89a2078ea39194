"""Ordered regex-rule tables kept in user-editable CSV files (``_shared/*.csv``).

Both the kernel categories (``category,pattern``) and the functional blocks
(``pattern,block,role``) are such tables: a header naming the columns (any
order), one rule per row, ``#`` comment lines and blank lines ignored, each
pattern a case-insensitive regular expression (Python syntax; matched in linear
time by RE2 through ``mcp_server.core.userregex``), first match wins. This module
parses and loads them (cached per path, mtime and size); the callers turn rows
into their own rule types.
"""
from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from mcp_server.core.errors import CategoriesError, FileMissingError
from mcp_server.core.userregex import UserRegex, compile_user_regex


@dataclass(frozen=True)
class RuleRow:
    line: int                 # line number in the file (header = 1)
    values: dict[str, str]    # column -> stripped text ('' for an absent optional column)
    regex: UserRegex          # the compiled pattern column (RE2 where it can run it: linear time)


@dataclass(frozen=True)
class RuleTable:
    rows: tuple[RuleRow, ...]
    source: str
    sha256: str


def parse_rule_table(text: str, source: str, *, required: Sequence[str], optional: Sequence[str] = (),
                     pattern: str = "pattern", what: str = "rules") -> RuleTable:
    """Parse CSV text; raises ``CategoriesError`` naming the file, the line and the problem."""
    numbered = [(i, ln) for i, ln in enumerate(text.splitlines(), start=1)
                if ln.strip() and not ln.lstrip().startswith("#")]
    if not numbered:
        raise CategoriesError(f"{what} file is empty; expected a header '{','.join(required)}'", path=source)
    rows = _csv_rows(numbered, source)
    header = [h.strip().lower() for h in rows[0]]
    missing = [c for c in required if c not in header]
    if missing:
        # what the line holds is never quoted: the file may be any file the caller named (/etc/passwd)
        raise CategoriesError(f"line {numbered[0][0]}: not a header naming the columns "
                              f"{', '.join(map(repr, required))}"
                              + (f" (optionally {', '.join(map(repr, optional))})" if optional else "")
                              + f"; {', '.join(map(repr, missing))} missing", path=source,
                              hint=f"is this a {what} CSV?")
    idx = {c: header.index(c) for c in (*required, *optional) if c in header}
    need = max(idx[c] for c in required)
    out: list[RuleRow] = []
    for (line, raw), row in zip(numbered[1:], rows[1:]):
        if len(row) <= need:
            raise CategoriesError(f"line {line}: {len(row)} field(s), the header asks for at least {need + 1} "
                                  f"(columns {', '.join(required)})", path=source)
        values = {c: (row[i].strip() if i < len(row) else "") for c, i in idx.items()}
        for c in optional:
            values.setdefault(c, "")
        empty = [c for c in required if not values[c]]
        if empty:
            raise CategoriesError(f"line {line}: empty {', '.join(empty)}", path=source)
        rx = compile_user_regex(values[pattern], ignorecase=True, where=f"line {line}", path=source,
                                column=_field_column(raw, idx[pattern], values[pattern]))
        out.append(RuleRow(line, values, rx))
    if not out:
        raise CategoriesError(f"no {what} found", path=source)
    return RuleTable(tuple(out), source, hashlib.sha256(text.encode()).hexdigest())


def _field_column(raw: str, index: int, value: str) -> int | None:
    """1-based column of field ``index``'s stripped text ``value`` in the line ``raw``; None when the line quotes
    fields (the text in the file differs from the value)."""
    if '"' in raw:
        return None
    start = sum(len(f) + 1 for f in raw.split(",")[:index])
    field = raw.split(",")[index] if index < raw.count(",") + 1 else ""
    lead = len(field) - len(field.lstrip())
    return start + lead + 1 if field.strip() == value else None


def _csv_rows(numbered: list[tuple[int, str]], source: str) -> list[list[str]]:
    """CSV rows of the numbered lines; a malformed line (a field over the csv module's 131 072-character
    limit, a NUL byte) is a ``CategoriesError`` naming its line."""
    reader = csv.reader(io.StringIO("\n".join(ln for _, ln in numbered)))
    rows: list[list[str]] = []
    try:
        for row in reader:
            rows.append(row)
    except csv.Error as exc:
        k = min(max(reader.line_num, 1), len(numbered)) - 1
        raise CategoriesError(f"line {numbered[k][0]}: not a CSV row ({exc})", path=source,
                              hint="a pattern is a short regular expression; fix or remove that line") from None
    return rows


@lru_cache(maxsize=32)
def _read_cached(path: str, mtime_ns: int, size: int, what: str) -> str:
    from mcp_server.core.limits import limit, over

    cap = limit("TEXT_FILE_BYTES")
    try:
        with open(path, "rb") as f:  # bounded: a device or endless file cannot fill the memory
            data = f.read(cap + 1)
        if len(data) > cap:
            raise over("TEXT_FILE_BYTES", f"the {what} file", path=path, unit="bytes")
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CategoriesError(f"{what} file is not UTF-8 text", path=path) from None


def read_rules_file(path: Path, *, what: str, hint: str) -> tuple[str, str]:
    """(text, resolved path) of a rules file; typed errors for a missing file or a directory."""
    if not path.exists():
        raise FileMissingError(f"{what} file not found", path=path, hint=hint)
    if path.is_dir():
        raise FileMissingError(f"{what} path is a directory, expected a CSV file", path=path)
    resolved = str(path.resolve())
    st = path.stat()
    return _read_cached(resolved, st.st_mtime_ns, st.st_size, what), resolved
