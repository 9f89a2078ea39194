"""The shared vocabulary (mcp_server/core/vocab.py): warning codes, reserved categories, module types."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from mcp_server.core import vocab
from mcp_server.core.categories import load_categories, parse_categories
from mcp_server.core.vocab import WarningCode

PKG = Path(__file__).resolve().parents[1] / "mcp_server"
TRACES = Path(__file__).parent / "fixtures" / "traces"
SHARED_CSV = Path(__file__).resolve().parents[1] / "_shared" / "kernel_categories.csv"


def _warning_code_args():
    """(file, line, code node) of every ``Warning_(code=...)`` call in the package."""
    for f in sorted(PKG.rglob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"), filename=str(f))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Warning_":
                for kw in node.keywords:
                    if kw.arg == "code":
                        yield f.relative_to(PKG), node.lineno, kw.value


def test_every_emitted_code_is_a_member():
    seen = 0
    for f, line, v in _warning_code_args():
        seen += 1
        if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "WarningCode":
            assert v.attr in WarningCode.__members__, f"{f}:{line}: WarningCode.{v.attr} is not a member"
        else:  # a pass-through of another warning's code (w.code) is fine; a literal is not
            assert not isinstance(v, ast.Constant), f"{f}:{line}: literal warning code {v.value!r}; use WarningCode"
    assert seen >= 30


def test_codes_are_one_snake_case_spelling():
    values = [m.value for m in WarningCode]
    assert len(values) == len(set(values))
    for m in WarningCode:
        assert m.name == m.value and re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", m.value), m
        assert m == m.value and f"{m}" == m.value and str(m) == m.value  # serialises as the plain string
    assert "gpu_kernels_truncated" in values and "summary_truncated" in values


def test_module_type_and_split_instance():
    assert vocab.module_type("LlamaDecoderLayer_12") == "LlamaDecoderLayer"
    assert vocab.module_type("Qwen2_5_VLAttention_0") == "Qwen2_5_VLAttention"
    assert vocab.module_type("Linear") == "Linear" and vocab.module_type("") == ""
    assert vocab.split_instance("Linear_7") == ("Linear", 7)
    assert vocab.split_instance("Linear") == ("Linear", 0)


def test_shared_categories_define_every_reserved_name():
    rules = load_categories()
    assert vocab.missing_reserved_categories(rules.categories) == []
    assert rules.reserved_warnings() == []


def _without_communication(tmp_path) -> Path:
    lines = [ln for ln in SHARED_CSV.read_text(encoding="utf-8").splitlines() if not ln.startswith("communication,")]
    p = tmp_path / "cats.csv"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_csv_without_communication_warns_and_layer_cuts_fall_back(tmp_path):
    from mcp_server.traces import analyze_trace

    trace = TRACES / "tp2_decode_mixed.json.gz"
    ok = analyze_trace(trace)
    assert ok.graph.layer_cut == "communication"
    assert WarningCode.reserved_category_missing not in {w.code for w in ok.warnings}

    cats = _without_communication(tmp_path)
    assert parse_categories(cats.read_text(encoding="utf-8")).reserved_warnings()[0].code == "reserved_category_missing"
    res = analyze_trace(trace, categories=cats)
    w = [w for w in res.warnings if w.code == WarningCode.reserved_category_missing]
    assert len(w) == 1 and "'communication'" in w[0].message and str(cats) in w[0].message
    assert res.graph.layer_cut != "communication"
    assert "communication" not in {c.category for c in res.categories}


def test_compare_warns_once_for_both_sides(tmp_path):
    from mcp_server.compare.budget import budget

    cats = _without_communication(tmp_path)
    res = budget(str(TRACES / "tp2_prefill.json.gz"), str(TRACES / "tp2_decode_mixed.json.gz"), categories=str(cats))
    assert [w.code for w in res.warnings].count(WarningCode.reserved_category_missing) == 1
