"""Code lines of a package, per sub-package: lines holding a token other than a comment or a docstring
(blank lines, comments and docstrings do not count), beside the physical line count.

    python tools/loc.py mcp_server
"""
from __future__ import annotations

import collections
import io
import sys
import tokenize
from pathlib import Path

SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
STATEMENT_EDGE = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL}


def code_lines(src: str) -> int:
    toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    lines: set[int] = set()
    for i, t in enumerate(toks):
        if t.type in SKIP:
            continue
        if t.type == tokenize.STRING:  # a string that is a whole statement is a docstring
            before = toks[i - 1].type if i else tokenize.NEWLINE
            after = toks[i + 1].type if i + 1 < len(toks) else tokenize.NEWLINE
            if before in STATEMENT_EDGE and after in (tokenize.NEWLINE, tokenize.ENDMARKER):
                continue
        lines.update(range(t.start[0], t.end[0] + 1))
    return len(lines)


def main(root: Path) -> None:
    code: collections.Counter[str] = collections.Counter()
    phys: collections.Counter[str] = collections.Counter()
    for f in root.rglob("*.py"):
        rel = f.relative_to(root).parts
        pkg = rel[0] if len(rel) > 1 else "(flat)"
        src = f.read_text()
        code[pkg] += code_lines(src)
        phys[pkg] += src.count("\n")
    for k in sorted(code):
        print(f"{k:14s} {code[k]:6d} {phys[k]:6d}")
    print(f"{'TOTAL':14s} {sum(code.values()):6d} {sum(phys.values()):6d}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "mcp_server"))
