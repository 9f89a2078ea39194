"""Text tables at 80 and 130 columns (a pipe, a wide terminal): every number, class and ratio whole; long names
shortened from the middle; paths never broken inside a name (mcp_server/core/textable.py, used by every renderer)."""
from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, TRACES
from rich.console import Console

from mcp_server.core.textable import Col, TextTable, middle, print_line
from mcp_server.faces.cli import main

NCU = FIXTURES / "ncu" / "targets_none.ncu-rep.xz"
LEDGER = Path(__file__).resolve().parents[1] / "mcp_server" / "demo_data" / "mla_example_ledger.db"
WIDTHS = (80, 130)


def _run(capsys, *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _json(capsys, *argv: str) -> dict:
    return json.loads(_run(capsys, *argv, "--json", "--detail"))


def test_middle_keeps_both_ends():
    assert middle("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", 15) == "nvjet_s…opB_NNT"
    assert middle("short", 10) == "short" and len(middle("x" * 50, 12)) == 12 and middle("abc", 1) == "…"


def test_values_are_never_cut_even_when_they_alone_overflow():
    t = TextTable([Col("name", "name")] + [Col(f"metric {i}") for i in range(12)])
    t.add_row("a_rather_long_kernel_name_that_has_to_give", *[f"{1234567.5 + i:,.1f}" for i in range(12)])
    buf = io.StringIO()
    t.print(Console(file=buf, width=80, color_system=None))
    text = buf.getvalue()
    for i in range(12):
        assert f"{1234567.5 + i:,.1f}" in text
    assert "a_rather" in text and "to_give" in text  # both ends of the name


def test_a_path_line_breaks_only_between_words():
    buf = io.StringIO()
    con = Console(file=buf, width=40, color_system=None)
    path = "/very/long/directory/name/holding/the/trace/llama_decode_graph.json.gz"
    print_line(con, f"{path}  NVIDIA H200 (nvidia) and more words after it")
    lines = buf.getvalue().splitlines()
    assert lines[0] == path and all(len(x) <= 40 for x in lines[1:])


@pytest.mark.parametrize("width", WIDTHS)
def test_classify_keeps_classes_limiters_and_shares(capsys, width):
    data = _json(capsys, "classify", str(NCU))
    text = _run(capsys, "classify", str(NCU), "--width", str(width))
    rows = {ln.split()[0]: ln for ln in text.splitlines() if re.match(r"\s*\d+\s", ln)}
    for k in data["kernels"]:
        row = rows[str(k["id"])]
        b = k["bottleneck"]
        for value in (b["class"], b["limiter"], f"{k['time_share']:.1%}", f"{b['confidence']:.2f}"):
            assert f" {value} " in f" {row} ", (value, row)
    assert "compute_bound" in text and "occupancy" in text and "…" not in text.split("total", 1)[1].split("\n\n")[0]


@pytest.mark.parametrize("width", WIDTHS)
def test_ncu_parse_keeps_every_time_and_percentage(capsys, width):
    data = _json(capsys, "ncu", "parse", str(NCU))
    text = _run(capsys, "ncu", "parse", str(NCU), "--width", str(width))
    assert max(len(x) for x in text.splitlines()[2:]) <= width  # the table fits; the names gave way
    for k in data["kernels"]:
        for ns in (k["duration_ns"]["total"], k["duration_ns"]["median"]):
            assert f"{ns / 1e3:,.1f}" in text
        for key in ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "l2_hit_rate_pct"):
            assert f"{k['metrics'][key]:.1f}" in text
    assert "2,810.6" in text and "2,810…" not in text
    # the kernel name keeps both of its ends
    assert re.search(r"nvjet_\S*…\S*_NNT", text) or "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_analyze_budget_and_timeline_keep_their_numbers(capsys, width):
    trace = str(TRACES / "dsv3_prefill.json.gz")
    data = _json(capsys, "analyze", trace)
    text = _run(capsys, "analyze", trace, "--width", str(width))
    for c in data["categories"]:
        assert re.search(rf"^{c['category']}\s+{c['count']:,}\s", text, re.M)
    eager, sdpa = str(TRACES / "llama_prefill_eager.json.gz"), str(TRACES / "llama_prefill_sdpa.json.gz")
    bud = _json(capsys, "budget", eager, sdpa)
    text = _run(capsys, "budget", eager, sdpa, "--width", str(width))
    for r in bud["rows"]:
        assert f"{r['a_us']:,.1f}" in text and f"{r['gap_us']:+,.1f}" in text
    tl = FIXTURES / "timeline"
    text = _run(capsys, "timeline", "analyze", str(tl / "imbalanced_probe.bin"), "--events",
                "load,compute,reduce,store,done", "--width", str(width))
    assert re.search(r"^compute\s+3\s+511\.1 us\s.*\s3\.73x\s", text, re.M)


@pytest.mark.parametrize("width", WIDTHS)
def test_ledger_list_tells_the_two_experiments_apart(capsys, tmp_path, width):
    """`ledger list` cut the target at 48 characters: both experiments read '/opt/torch/.venv/bin/python3 /work...'."""
    db = tmp_path / "l.db"
    shutil.copyfile(LEDGER, db)
    text = _run(capsys, "ledger", "list", "--ledger", str(db), "--width", str(width))
    rows = [ln for ln in text.splitlines() if re.match(r"\s*[12]\s+\d\d-\d\d", ln)]
    assert len(rows) == 2
    assert "--layers 16" in rows[1] and re.search(r"--layers 1\s", rows[0])
    assert re.search(r"python3? mla_", rows[0])  # paths by their file names (the recorded interpreter's)


def test_ledger_show_says_the_decision_once(capsys, tmp_path):
    """'accepted  accepted 2.917x' read as a stutter: the validation's verdict is shown only where it differs."""
    db = tmp_path / "l.db"
    shutil.copyfile(LEDGER, db)
    one = _run(capsys, "ledger", "show", "1", "--ledger", str(db), "--width", "130")
    assert "accepted, speedup 2.917x [2.890, 2.956]" in one and "accepted  accepted" not in one
    two = _run(capsys, "ledger", "show", "2", "--ledger", str(db), "--width", "130")
    assert "reverted (validation: not_faster), speedup 0.997x" in two


def test_paths_in_text_lines_stay_whole(capsys, tmp_path):
    """A report path on a narrow console moves to its own line instead of breaking inside a name."""
    db = tmp_path / "l.db"
    shutil.copyfile(LEDGER, db)
    text = _run(capsys, "ledger", "show", "1", "--ledger", str(db), "--width", "40")
    assert "/tmp/ex/reports/e1-p1.ncu-rep" in text.splitlines()
    text = _run(capsys, "classify", str(NCU), "--width", "40")
    assert str(NCU) in [ln.strip() for ln in text.splitlines()]


def test_renderers_build_their_tables_with_the_shared_helper():
    """One helper for every CLI table: a renderer that builds a rich Table itself can cut numbers again.
    compare's block panels are the exception: one folded kernel column takes all the slack (ratio=1) and
    their numbers are no_wrap columns sized by their cells."""
    root = Path(__file__).resolve().parents[1] / "mcp_server"
    allowed = {"core/textable.py", "compare/render.py"}
    users = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                   if "from rich.table import Table" in p.read_text() and str(p.relative_to(root)) not in allowed)
    assert users == [], f"use mcp_server.core.textable.TextTable in {users}"
