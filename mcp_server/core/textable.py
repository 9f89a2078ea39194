"""The CLI's text tables (every verb's renderer uses ``TextTable``): a value is never cut.

A column is one of three kinds:

* ``value`` (the default): numbers, units, classes, ratios, flags. Never cut, never wrapped; the
  column is as wide as its widest cell.
* ``name``: kernel, module, file and proposal names. Shortened from the middle (``gemm_b…_NNT``) to
  what is left of the width, so both ends, which tell names apart, stay.
* ``text``: free prose (advice, details, reasons). Wrapped at word boundaries, never cut.

The widths are computed here rather than left to rich, which shrinks every column, numbers included
(``compute…``, ``2,810…``), when a table is wider than the console. When even the values and the
narrowest names do not fit (many columns at 80), the table is printed wider than the console:
lines longer than the width, nothing cut.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Optional

from rich import box as rich_box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

Kind = Literal["value", "name", "text"]
Justify = Literal["left", "center", "right"]

ELLIPSIS = "…"


def middle(text: str, width: int) -> str:
    """``text`` shortened to ``width`` characters by cutting its middle (``abcdef…uvwxyz``)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:max(width, 0)]
    keep = width - 1
    head = (keep + 1) // 2
    tail = keep - head
    return text[:head] + ELLIPSIS + (text[len(text) - tail:] if tail else "")


@dataclass(frozen=True)
class Col:
    """One column: its header, kind (``value`` / ``name`` / ``text``), alignment and, for names and
    text, the narrowest width it is given before the table grows past the console."""

    header: str
    kind: Kind = "value"
    justify: Optional[Justify] = None  # default: values right, names and text left
    min_width: int = 0  # names: 16, text: 24 unless given

    @property
    def align(self) -> Justify:
        if self.justify is not None:
            return self.justify
        return "right" if self.kind == "value" else "left"

    @property
    def floor(self) -> int:
        return self.min_width or (16 if self.kind == "name" else 24)


def _header_words(header: str) -> list[str]:
    return [w for w in re.split(r"\s+|(?<=-)", header) if w]


def _wrap_header(header: str, width: int) -> str:
    """The header in lines of at most ``width`` (split at spaces and after hyphens), so it is never cut."""
    if len(header) <= width:
        return header
    lines: list[str] = []
    for word in _header_words(header):
        glue = "" if lines and lines[-1].endswith("-") else " "
        if lines and len(lines[-1]) + len(glue) + len(word) <= width:
            lines[-1] += glue + word
        else:
            lines.append(word)
    return "\n".join(lines)


def _cell_len(markup: str | Text) -> int:
    if isinstance(markup, Text):
        return max((line.cell_len for line in markup.split("\n")), default=0)
    return max((Text.from_markup(line, emoji=False).cell_len for line in markup.split("\n")), default=0)


class TextTable:
    """A rich table whose values are never cut; build it, ``add_row`` plain names and markup values,
    then ``print(console)``. Extra keywords go to ``rich.table.Table`` (title, caption, box, ...)."""

    def __init__(self, columns: list[Col], **table_kw: object):
        self.columns = list(columns)
        self.rows: list[list[str | Text]] = []
        self.sections: set[int] = set()
        self.table_kw = {"box": rich_box.SIMPLE_HEAD, "padding": (0, 1, 0, 0), "pad_edge": False,
                         "show_edge": False, **table_kw}

    def add_row(self, *cells: object) -> None:
        """Cells in column order: a ``name`` cell is plain text (escaped here), other cells rich markup or
        ``Text``."""
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(["" if c is None else c if isinstance(c, Text) else str(c) for c in cells])

    def add_section(self) -> None:
        """A rule before the next row (a total under the rows)."""
        self.sections.add(len(self.rows))

    def __len__(self) -> int:
        return len(self.rows)

    # ------------------------------------------------------------------ layout

    def _overhead(self, console: Console) -> int:
        probe = Table(**self.table_kw)  # type: ignore[arg-type]
        for _ in self.columns:
            probe.add_column(width=1, no_wrap=True)
        probe.add_row(*(["x"] * len(self.columns)))
        probe.title = probe.caption = None
        m = Measurement.get(console, console.options.update(width=100_000), probe)
        return m.maximum - len(self.columns)

    def widths(self, console: Console, width: Optional[int] = None) -> tuple[list[int], int]:
        """Per column its width, and the table's total width, for a console ``width`` wide."""
        width = console.width if width is None else width
        natural, narrow = [], []  # per column: with its header on one line; with it wrapped at spaces, hyphens
        for i, col in enumerate(self.columns):
            cells = [r[i] for r in self.rows]
            body = max((len(str(c)) if col.kind == "name" else _cell_len(c) for c in cells), default=0)
            head = max((len(w) for w in _header_words(col.header)), default=1)
            natural.append(max(body, head if col.kind == "text" else _cell_len(col.header), 1))
            narrow.append(max(body, head, 1) if col.kind == "value" else natural[-1])
        flex = [i for i, c in enumerate(self.columns) if c.kind != "value"]
        overhead = self._overhead(console)
        if overhead + sum(natural) > width:  # first wrap the values' headers, then shorten names
            natural = [narrow[i] if i not in flex else natural[i] for i in range(len(natural))]
        fixed = sum(natural[i] for i in range(len(self.columns)) if i not in flex)
        avail = width - overhead - fixed
        out = list(natural)
        if sum(natural[i] for i in flex) > avail:
            base = {i: max(min(natural[i], self.columns[i].floor),
                           max((len(w) for w in self.columns[i].header.split()), default=1)) for i in flex}
            spare = avail - sum(base.values())
            for i in flex:
                out[i] = base[i]
            want = {i: natural[i] - base[i] for i in flex if natural[i] > base[i]}
            while spare > 0 and want:  # water-filling: the narrowest wanting column grows first
                share = max(spare // len(want), 1)
                for i in sorted(want, key=lambda j: out[j]):
                    give = min(share, want[i], spare)
                    out[i] += give
                    want[i] -= give
                    spare -= give
                    if not want[i]:
                        del want[i]
                    if spare <= 0:
                        break
        return out, overhead + sum(out)

    def build(self, console: Console, width: Optional[int] = None) -> tuple[Table, int]:
        widths, total = self.widths(console, width)
        t = Table(**self.table_kw)  # type: ignore[arg-type]
        for col, w in zip(self.columns, widths):
            head = escape(_wrap_header(col.header, w))
            if col.kind == "text":
                t.add_column(head, width=w, justify=col.align, overflow="fold")
            else:
                t.add_column(head, width=w, justify=col.align, no_wrap=True)
        for i, row in enumerate(self.rows):
            if i in self.sections:
                t.add_section()
            cells = [escape(middle(str(c), w)) if col.kind == "name" else c
                     for c, col, w in zip(row, self.columns, widths)]
            t.add_row(*cells)
        return t, total

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """``console.print(table)`` works too, within the width it is given (values are never cut; when
        they alone need more, ``print`` widens the output instead)."""
        yield self.build(console, options.max_width)[0]

    def print(self, console: Console) -> None:
        """Print at the console's width, or wider when the values alone need more (nothing is cut)."""
        table, total = self.build(console)
        if total <= console.width:
            console.print(table)
            return
        old = console.width
        console.width = total
        try:
            console.print(table)
        finally:
            console.width = old


def print_line(console: Console, markup: str, *, highlight: bool = False) -> None:
    """A line of prose holding paths or names: wrapped only at spaces, never inside a word or a path
    (a word longer than the width runs past it instead of breaking)."""
    for text in Text.from_markup(markup, emoji=False).split("\n"):
        cuts: list[int] = []
        start = 0
        for m in re.finditer(r"\S+", text.plain):
            if m.start() > start and m.end() - start > console.width:
                cuts.append(m.start())
                start = m.start()
        for part in text.divide(cuts):
            part.rstrip()
            console.print(part, soft_wrap=True, highlight=highlight)


def print_warnings(console: Console, warnings: Iterable[Any], *, highlight: bool = True, indent: str = "") -> None:
    """One ``warning CODE: message`` line per warning, below (or above) a verb's tables."""
    for w in warnings:
        console.print(f"{indent}[yellow]warning[/] {escape(str(w.code))}: {escape(w.message)}", highlight=highlight)


class PipeConsole(Console):
    """rich's console, except that a closed pipe (``kernelscope ... | head``) raises ``BrokenPipeError`` for the
    caller to end quietly with status 0, as standard tools do (rich's own handler exits 1 with no message)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so the interpreter's last flush cannot fail again."""
    import os
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
