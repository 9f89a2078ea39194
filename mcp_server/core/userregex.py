"""Regular expressions that users supply (rule tables, proposal selectors), run in linear time.

A user pattern keeps Python ``re`` syntax and meaning, but it is matched by RE2
(``google-re2``), whose running time is linear in the text: no pattern, however
written (``(.*)*Q$``), can stall the process. The pattern is parsed by Python's
own parser and the parse tree is written back out in RE2 syntax with every
construct made explicit (``.`` as ``[^\\n]``, ``\\s`` as ``[\\t-\\r ]``, ``$`` as
Python's end-or-before-a-final-newline), so what matches is what Python's
``re`` would match. Two corners RE2 cannot express for every text are sent to
Python's ``re`` for that text only: a non-ASCII text when the pattern uses
``\\d \\w \\s \\b`` (Python's are Unicode-aware, RE2's ASCII) and a text with a
newline before its end when the pattern uses ``$``.

Patterns RE2 cannot run (lookarounds, backreferences, atomic groups, possessive
repeats, a repetition count over 1000) are run by Python's ``re`` only when a
quick check finds no nested or alternated repetition (the shapes that backtrack
exponentially); every such match runs under a CPU-time bound
(``KERNELSCOPE_REGEX_TIMEOUT`` seconds, default 1) where a timer can be armed
(the main thread; elsewhere the server worker's time limit is the backstop).

Every failure is ``CategoriesError`` (or the caller's error class) naming the
file and the line: a bad pattern, a repetition count too large for Python
(``OverflowError``), a pattern nested too deeply (``RecursionError``).
"""
from __future__ import annotations

import importlib
import re
import signal
import threading
import time
import warnings
from typing import Any, Callable, Optional

try:  # Python's own pattern parser: re._parser from 3.11, sre_parse before
    _sre_parse: Any = importlib.import_module("re._parser")
    _c: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - Python 3.10
    _sre_parse = importlib.import_module("sre_parse")
    _c = importlib.import_module("sre_constants")

from mcp_server.core.envvars import default, env
from mcp_server.core.errors import CategoriesError, KernelscopeError

try:
    from re2 import _re2  # google-re2
except ImportError:  # pragma: no cover - the dependency is declared; keep working without it
    _re2 = None

DEFAULT_TIMEOUT_S = float(default("KERNELSCOPE_REGEX_TIMEOUT"))
RE2_MAX_REPEAT = 1000  # RE2 refuses counted repetitions above this


class _Unsupported(Exception):
    """The parse tree holds a construct RE2 has no equivalent for."""


def _esc(ch: int) -> str:
    c = chr(ch)
    if c.isascii() and c.isalnum():
        return c
    return "\\x{%x}" % ch


_ASCII_CLASS = {  # inside brackets; POSIX classes are exactly Python's ASCII \d \s \w
    _c.CATEGORY_DIGIT: "[:digit:]", _c.CATEGORY_NOT_DIGIT: "[:^digit:]",
    _c.CATEGORY_SPACE: "[:space:]", _c.CATEGORY_NOT_SPACE: "[:^space:]",
    _c.CATEGORY_WORD: "[:word:]", _c.CATEGORY_NOT_WORD: "[:^word:]",
}


class _Translation:
    """RE2 text of a parsed Python pattern (two variants of ``$``) and what it relies on."""

    def __init__(self, parsed: Any, flags: int):
        self.ascii_sensitive = False  # uses \d \w \s \b (Unicode-aware in Python, ASCII in RE2)
        self.end_anchor = False       # uses non-multiline $ (Python: end, or before a final newline)
        self._end_nl = False
        head = "(?" + self._flag_prefix(flags) + ":"
        self.plain = head + self._seq(parsed, flags) + ")"
        self._end_nl = True
        self.final_nl = head + self._seq(parsed, flags) + ")" if self.end_anchor else self.plain

    def _seq(self, items: Any, flags: int) -> str:
        return "".join(self._node(op, av, flags) for op, av in items)

    def _node(self, op: Any, av: Any, flags: int) -> str:
        if op is _c.LITERAL:
            return _esc(av)
        if op is _c.NOT_LITERAL:
            return "[^" + _esc(av) + "]"
        if op is _c.ANY:
            return "(?s:.)" if flags & re.DOTALL else "[^\\n]"
        if op is _c.IN:
            return self._set(av, flags)
        if op is _c.BRANCH:
            return "(?:" + "|".join(self._seq(b, flags) for b in av[1]) + ")"
        if op is _c.SUBPATTERN:
            _group, add, dele, sub = av
            inner_flags = (flags | add) & ~dele
            return "(?" + self._flag_prefix(inner_flags) + ":" + self._seq(sub, inner_flags) + ")"
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            lo, hi, sub = av
            if lo > RE2_MAX_REPEAT or (hi != _c.MAXREPEAT and hi > RE2_MAX_REPEAT):
                raise _Unsupported("repetition count over 1000")
            body = "(?:" + self._seq(sub, flags) + ")"
            if hi == _c.MAXREPEAT:
                q = "*" if lo == 0 else "+" if lo == 1 else "{%d,}" % lo
            elif lo == hi:
                q = "{%d}" % lo
            else:
                q = "{%d,%d}" % (lo, hi)
            return body + q + ("?" if op is _c.MIN_REPEAT else "")
        if op is _c.AT:
            return self._at(av, flags)
        raise _Unsupported(str(op))

    @staticmethod
    def _flag_prefix(flags: int) -> str:
        on = ("i" if flags & re.IGNORECASE else "") + ("m" if flags & re.MULTILINE else "") \
            + ("s" if flags & re.DOTALL else "")
        off = ("" if flags & re.IGNORECASE else "i") + ("" if flags & re.MULTILINE else "m") \
            + ("" if flags & re.DOTALL else "s")
        return on + ("-" + off if off else "")

    def _set(self, items: Any, flags: int) -> str:
        out = []
        neg = False
        for op, av in items:
            if op is _c.NEGATE:
                neg = True
            elif op is _c.LITERAL:
                out.append(_esc(av))
            elif op is _c.RANGE:
                out.append(_esc(av[0]) + "-" + _esc(av[1]))
            elif op is _c.CATEGORY:
                if not flags & re.ASCII:
                    self.ascii_sensitive = True
                out.append(_ASCII_CLASS[av])
            else:
                raise _Unsupported(str(op))
        if not out:
            raise _Unsupported("empty set")
        return "[" + ("^" if neg else "") + "".join(out) + "]"

    def _at(self, code: Any, flags: int) -> str:
        multi = bool(flags & re.MULTILINE)
        if code is _c.AT_BEGINNING:
            return "(?m:^)" if multi else "\\A"
        if code is _c.AT_BEGINNING_STRING:
            return "\\A"
        if code is _c.AT_END:
            if multi:
                return "(?m:$)"
            self.end_anchor = True
            # Python: at the end, or before a newline that ends the text. For a text whose only
            # newline is its last character, RE2's multi-line $ is exactly that.
            return "(?m:$)" if self._end_nl else "\\z"
        if code is _c.AT_END_STRING:
            return "\\z"
        if code in (_c.AT_BOUNDARY, _c.AT_NON_BOUNDARY):
            if not flags & re.ASCII:
                self.ascii_sensitive = True
            return "\\b" if code is _c.AT_BOUNDARY else "\\B"
        raise _Unsupported(str(code))


def _backtrack_risk(items: Any, in_repeat: bool = False) -> Optional[str]:
    """Why Python's engine could backtrack without bound on this tree, or None.

    Refused inside an unbounded-or-repeated repetition: another repetition, an alternation,
    or a backreference (``(a+)+``, ``(a|a)*``, ``(.*)*``).
    """
    for op, av in items:
        subs: list = []  # the sub-trees to look into, in order
        inner = in_repeat
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)):
            lo, hi, sub = av
            if in_repeat and hi > 1:
                return "nested repetition"
            subs, inner = [sub], in_repeat or hi > 1
        elif op is _c.BRANCH:
            if in_repeat:
                return "alternation inside a repetition"
            subs = av[1]
        elif op is _c.SUBPATTERN:
            subs = [av[-1]]
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            subs = [av[1]]
        elif op is getattr(_c, "ATOMIC_GROUP", None):
            subs = [av]
        elif op is _c.GROUPREF_EXISTS:
            subs = [b for b in av[1:] if b is not None]
        elif op is _c.GROUPREF and in_repeat:
            return "backreference inside a repetition"
        for sub in subs:
            why = _backtrack_risk(sub, inner)
            if why:
                return why
    return None


def _timeout_s() -> float:
    try:
        return max(0.01, float(env("KERNELSCOPE_REGEX_TIMEOUT") or DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S


class _Overrun(Exception):
    pass


def _bounded(fn: Callable[[str], Any], text: str, seconds: float) -> Any:
    """``fn(text)`` under a CPU-time bound where a timer can be armed (the main thread)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return fn(text)  # the server worker's time limit is the backstop here

    def _raise(_signum: int, _frame: Any) -> None:
        raise _Overrun()

    old_handler = signal.signal(signal.SIGVTALRM, _raise)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    start = time.process_time()
    try:
        return fn(text)
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old_handler)
        if old_delay:  # someone else's virtual timer: give it back what is left of it
            left = max(old_delay - (time.process_time() - start), 0.001)
            signal.setitimer(signal.ITIMER_VIRTUAL, left, old_interval)


class UserRegex:
    """A compiled user pattern; ``search(text)`` says whether it is found anywhere in ``text``."""

    __slots__ = ("pattern", "engine", "where", "_error", "_py", "_re2", "_re2_nl", "_ascii_sensitive",
                 "_end_anchor", "_ignorecase", "_py_safe", "column")

    def __init__(self, pattern: str, *, ignorecase: bool = True, where: str = "pattern",
                 error: type[KernelscopeError] = CategoriesError, path: Any = None, column: Optional[int] = None):
        self.pattern = pattern
        self.where = where
        self.column = column
        self._error = (error, path)
        self._ignorecase = ignorecase
        flags = re.IGNORECASE if ignorecase else 0
        try:
            with warnings.catch_warnings():  # "possible nested set": the pattern is taken as Python reads it
                warnings.simplefilter("ignore")
                parsed = _sre_parse.parse(pattern, flags)
        except re.error as exc:
            raise error(f"{self._at(exc.pos)}: bad regex: {exc.msg}", path=path) from None
        except OverflowError:
            raise error(f"{where}: bad regex: a repetition count is too large", path=path) from None
        except RecursionError:
            raise error(f"{where}: bad regex: groups nested too deeply", path=path) from None
        self._re2 = self._re2_nl = None
        self._ascii_sensitive = self._end_anchor = False
        try:
            risk = _backtrack_risk(parsed)
        except RecursionError:
            raise error(f"{where}: bad regex: groups nested too deeply", path=path) from None
        self._py_safe = risk is None
        why_not = "google-re2 is not installed"
        if _re2 is not None:
            try:
                tr = _Translation(parsed, parsed.state.flags)
                self._re2 = _compile_re2(tr.plain)
                self._re2_nl = _compile_re2(tr.final_nl) if tr.end_anchor else self._re2
                self._ascii_sensitive, self._end_anchor = tr.ascii_sensitive, tr.end_anchor
                self.engine = "re2"
                self._py = None  # Python's program, compiled the first time a text needs it
                return
            except _Unsupported as exc:
                why_not = f"RE2 cannot run it ({exc})"
            except RecursionError:
                raise error(f"{where}: bad regex: groups nested too deeply", path=path) from None
            except ValueError as exc:
                why_not = f"RE2 cannot run it ({exc})"
        self._py = self._compile_py(flags)
        if risk:
            raise error(f"{where}: regex: {why_not}, and Python's engine could backtrack "
                        f"without bound on it ({risk}); rewrite it without lookarounds or backreferences "
                        f"so the linear-time engine runs it", path=path)
        self.engine = "re"

    def _at(self, pos: Optional[int]) -> str:
        """Where in the file a parse error is: ``line 4, column 12`` (never the pattern's text: the file may be
        one the caller should not see echoed)."""
        if pos is None:
            return self.where
        if self.column is not None:
            return f"{self.where}, column {self.column + pos}"
        return f"{self.where}, character {pos + 1} of the pattern"

    def search(self, text: str) -> bool:
        r2 = self._re2
        if r2 is not None:
            if text.isascii():
                data = text.encode("ascii")
            elif self._py_safe or self._ascii_sensitive:
                return self._py_search(text)  # Python's Unicode classes and case folding, exactly
            else:  # a pattern only RE2 runs safely: RE2 (its case folding of a few letters differs)
                try:
                    data = text.encode("utf-8")
                except UnicodeEncodeError:  # a lone surrogate: only Python's engine reads it
                    return self._py_search(text)
            if not self._end_anchor or "\n" not in text:
                return _re2_found(r2, data)
            if text.find("\n") == len(text) - 1:
                return _re2_found(self._re2_nl, data)
        return self._py_search(text)

    def _compile_py(self, flags: int) -> re.Pattern[str]:
        err, path = self._error
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return re.compile(self.pattern, flags)
        except re.error as exc:
            raise err(f"{self._at(exc.pos)}: bad regex: {exc.msg}", path=path) from None
        except (OverflowError, RecursionError):
            raise err(f"{self.where}: bad regex: too large or nested too deeply",
                      path=path) from None

    def _py_search(self, text: str) -> bool:
        seconds = _timeout_s()
        if self._py is None:
            self._py = self._compile_py(re.IGNORECASE if self._ignorecase else 0)
        py = self._py
        try:
            return _bounded(lambda t: py.search(t) is not None, text, seconds)
        except _Overrun:
            err, path = self._error
            raise err(f"{self.where}: regex ran over {seconds:g} s of CPU on one name "
                      f"(Python's engine backtracks on it); rewrite it so RE2 can run it, or raise "
                      f"KERNELSCOPE_REGEX_TIMEOUT", path=path) from None

    def __reduce__(self) -> Any:
        err, path = self._error
        return (_rebuild, (self.pattern, self._ignorecase, self.where, err, path, self.column))

    def __repr__(self) -> str:
        return f"UserRegex({self.pattern!r}, engine={self.engine!r})"


def _rebuild(pattern: str, ignorecase: bool, where: str, error: type[KernelscopeError], path: Any,
             column: Optional[int] = None) -> UserRegex:
    return UserRegex(pattern, ignorecase=ignorecase, where=where, error=error, path=path, column=column)


_OPTIONS: Any = None
_UNANCHORED: Any = None


def _compile_re2(text: str) -> Any:
    global _OPTIONS, _UNANCHORED
    if _OPTIONS is None:
        opts = _re2.RE2.Options()
        opts.never_capture = True
        opts.log_errors = False
        _OPTIONS, _UNANCHORED = opts, _re2.RE2.Anchor.UNANCHORED
    rx = _re2.RE2(text.encode("utf-8"), _OPTIONS)
    if not rx.ok():
        raise ValueError(rx.error().decode("utf-8", "replace"))
    return rx


def _re2_found(rx: Any, data: bytes) -> bool:
    return rx.Match(_UNANCHORED, data, 0, len(data))[0][0] >= 0


def compile_user_regex(pattern: str, *, ignorecase: bool = True, where: str = "pattern",
                       error: type[KernelscopeError] = CategoriesError, path: Any = None,
                       column: Optional[int] = None) -> UserRegex:
    """Compile a user pattern (Python ``re`` syntax); raises ``error`` naming ``path``, ``where`` and, for a
    syntax error, the column (``column``: that of the pattern's first character in its line) or the character
    of the pattern. No message quotes the pattern."""
    return UserRegex(pattern, ignorecase=ignorecase, where=where, error=error, path=path, column=column)
