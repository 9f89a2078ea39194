#!/usr/bin/env python3
"""Validate every skill under skills/ with the Agent Skills reference validator (skills-ref).

The portable frontmatter (name, description, license, compatibility, metadata, allowed-tools)
goes through the reference validator unchanged. Claude Code reads one more field that the open
specification does not list, ``argument-hint`` (the hint shown after a slash command); other
clients ignore it. It is checked here (a one-line string) and removed before the reference
validator sees the rest, so every other rule of the specification still applies.

Usage: python tools/validate_skills.py [SKILL_DIR...]   (default: every skills/*/); exit 1 on errors.
"""
from __future__ import annotations

import sys
from pathlib import Path

from skills_ref.errors import ParseError
from skills_ref.parser import find_skill_md, parse_frontmatter
from skills_ref.validator import validate_metadata

#: Frontmatter fields of Claude Code's skills that the Agent Skills specification does not define.
CLAUDE_CODE_FIELDS = ("argument-hint",)


def validate(skill_dir: Path) -> list[str]:
    skill_md = find_skill_md(skill_dir)
    if skill_md is None:
        return ["Missing required file: SKILL.md"]
    try:
        meta, _ = parse_frontmatter(skill_md.read_text(encoding="utf-8"))
    except ParseError as exc:
        return [str(exc)]
    errors = []
    for key in CLAUDE_CODE_FIELDS:
        value = meta.pop(key, None)
        if value is not None and (not isinstance(value, str) or "\n" in value or len(value) > 200):
            errors.append(f"{key} must be a one-line string of at most 200 characters")
    return errors + validate_metadata(meta, skill_dir)


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    dirs = [Path(a) for a in argv] or sorted(p.parent for p in (root / "skills").glob("*/SKILL.md"))
    bad = 0
    for d in dirs:
        errors = validate(d)
        print(f"{d}: {'valid' if not errors else 'INVALID'}")
        for e in errors:
            print(f"  - {e}")
        bad += bool(errors)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
