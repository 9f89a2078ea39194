"""User-supplied regexes run by RE2 with Python's meaning: parity, linear time, typed errors."""
from __future__ import annotations

import gzip
import json
import pickle
import re
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_server.compare.blocks import load_blocks, module_keys
from mcp_server.compare.inputs import load_side
from mcp_server.core.categories import DEFAULT_CATEGORY, load_categories, parse_categories
from mcp_server.core.errors import CategoriesError, ProposalError
from mcp_server.core.userregex import compile_user_regex

TRACES = Path(__file__).parent / "fixtures" / "traces"
ALL_TRACES = sorted(TRACES.glob("*.json.gz"))


def _kernel_names() -> list[str]:
    names: set[str] = set()
    for p in ALL_TRACES:
        for e in json.loads(gzip.decompress(p.read_bytes()))["traceEvents"]:
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                names.add(e["name"])
    return sorted(names)


def _python_first(patterns: list[str], text: str) -> int | None:
    """The classifier as it was: Python's re, case-insensitive, first match wins."""
    for i, p in enumerate(patterns):
        if re.compile(p, re.IGNORECASE).search(text):
            return i
    return None


def test_every_committed_kernel_name_classifies_as_with_python_re():
    names = _kernel_names()
    assert len(names) > 100 and all(n.isascii() for n in names)
    rules = load_categories()
    assert all(r.regex.engine == "re2" for r in rules.rules)
    pats = [r.pattern for r in rules.rules]
    for n in names:
        i = _python_first(pats, n)
        assert rules.classify(n) == (rules.rules[i].category if i is not None else DEFAULT_CATEGORY), n
        # every rule, not only the first hit
        assert [r.regex.search(n) for r in rules.rules] == [bool(re.search(p, n, re.I)) for p in pats], n
    cats = {rules.classify(n) for n in names}
    assert {"gemm", "attention", "communication", "moe", "elementwise"} <= cats


def test_every_committed_module_key_gets_the_same_block():
    rules = load_blocks()
    assert all(r.regex.engine == "re2" for r in rules.rules)
    pats = [r.pattern for r in rules.rules]
    keys: set[str] = set()
    for p in ALL_TRACES:
        keys.update(k for k in module_keys(load_side(p).kernels)[0] if k)
    assert len(keys) > 20
    hits = set()
    for k in keys:
        i = _python_first(pats, k)
        assert rules.match(k, "fallback") == ((rules.rules[i].block, rules.rules[i].role) if i is not None
                                               else ("fallback", "")), k
        hits.add(i)
    assert len(hits) > 5  # the keys exercise many rows, not only the fallback


def test_catastrophic_pattern_is_linear():
    rules = parse_categories("category,pattern\nslow,(.*)*Q$\nx,(a+)+b\n", "evil.csv")
    t0 = time.perf_counter()
    for n in ("a" * 200_000, "a" * 50_000 + "!", "é" * 20_000 + "b"):
        rules._memo.clear()
        assert rules.classify(n) in ("x", DEFAULT_CATEGORY)
    assert rules.classify("a" * 10_000 + "Q") == "slow"
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize("pattern, what", [
    ("a{99999999999}", "repetition count is too large"),   # OverflowError in Python's parser
    ("(" * 5000 + "x" + ")" * 5000, "nested too deeply"),  # RecursionError
    ("(unclosed", "bad regex"),
    (r"(?<=x)(a+)+b", "backtrack"),                         # RE2 cannot, Python must not
    (r"(a|ab)*\1", "backtrack"),
])
def test_bad_patterns_are_line_numbered_errors(pattern, what):
    text = f"category,pattern\n# comment\ngemm,gemm\nbad,{pattern}\n"
    with pytest.raises(CategoriesError) as ei:
        parse_categories(text, "cats.csv")
    msg = str(ei.value)
    assert "cats.csv" in msg and "line 4" in msg and what in msg and "\n" not in msg and len(msg) < 400


def test_python_only_pattern_runs_under_a_time_bound(monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_REGEX_TIMEOUT", "0.2")
    rules = parse_categories("category,pattern\nlook,(?<=x)a*a*a*a*a*b\nok,(?<!y)gemm\n", "cats.csv")
    assert [r.regex.engine for r in rules.rules] == ["re", "re"]
    assert rules.classify("xaab") == "look" and rules.classify("my_gemm") == "ok"
    t0 = time.perf_counter()
    with pytest.raises(CategoriesError, match=r"line 2: .*ran over 0.2 s"):
        rules.classify("x" + "a" * 3000 + "c")
    assert time.perf_counter() - t0 < 3.0


def test_non_ascii_and_newline_texts_keep_pythons_meaning():
    cases = [r"\w+$", r"^\d", r"\bé", r"\s", r"x$", r"(.*)*Q$", "k", r"[a-z]+\Z", r"(?m)^b$"]
    texts = ["é", "٣x", "a\u00a0b", "ǅ", "\u212a", "x\n", "x\n\n", "ax\nb", "Q\n", "İ", "b\n", "\ud800x"]
    for p in cases:
        u = compile_user_regex(p)
        for t in texts:
            assert u.search(t) == bool(re.search(p, t, re.I)), (p, t)


def test_pickles_and_proposal_selector(tmp_path):
    u = pickle.loads(pickle.dumps(compile_user_regex(r"gemm|bmm", where="line 2")))
    assert u.search("batched_BMM") and u.engine == "re2"
    u = compile_user_regex(r"Gemm", ignorecase=False, where="proposal 'p'", error=ProposalError, path="p.toml")
    assert u.search("xGemm") and not u.search("gemm")
    with pytest.raises(ProposalError, match="p.toml"):
        compile_user_regex("(", ignorecase=False, error=ProposalError, path="p.toml")


_ATOMS = st.sampled_from(["a", "b", "B", "_", ".", r"\d", r"\w", r"\s", r"\W", r"\b", "^", "$", r"\A", r"\Z",
                          "[ab]", "[^a]", "[a-c_]", r"[\d\s]", r"[^\w]", "\n", r"\.", "-", "x"])


def _pattern():
    leaf = _ATOMS
    return st.recursive(leaf, lambda inner: st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map(lambda t: f"(?:{t[0]}|{t[1]})"),
        st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{1,3}", "{,2}", "*?", "{2,}"]))
          .map(lambda t: f"({t[0]}){t[1]}"),
        st.tuples(st.sampled_from(["(?i:", "(?-i:", "(?s:", "(?m:"]), inner).map(lambda t: f"{t[0]}{t[1]})"),
    ), max_leaves=6)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(_pattern(), st.lists(st.text(alphabet="abB_x.\n -1é\u212a", max_size=8), min_size=1, max_size=6),
       st.booleans())
def test_random_patterns_match_as_python_re(pattern, texts, ignorecase):
    try:
        ref = re.compile(pattern, re.IGNORECASE if ignorecase else 0)
    except re.error:
        return
    u = compile_user_regex(pattern, ignorecase=ignorecase)
    for t in texts:
        assert u.search(t) == bool(ref.search(t)), (pattern, t, u.engine)
