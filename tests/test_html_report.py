"""HTML and xlsx outputs of diff_modules; the HTML is loaded in headless Chromium."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from mcp_server.compare.diff import diff_modules
from mcp_server.compare.html import render_diff_html, write_diff_html
from mcp_server.core.errors import WriteError

TRACES = Path(__file__).parent / "fixtures" / "traces"
EAGER = TRACES / "llama_prefill_eager.json.gz"
SDPA = TRACES / "llama_prefill_sdpa.json.gz"


@pytest.fixture(scope="module")
def res():
    return diff_modules(EAGER, SDPA, labels=["eager", "sdpa"])


def test_html_is_self_contained(res):
    text = render_diff_html(res)
    assert '<table id="blocks">' in text
    assert "<svg" in text and "by category" in text  # inline budget chart
    assert not re.search(r"<(link|img|iframe)\b", text)
    assert not re.search(r"\bsrc\s*=", text)
    # the attention panel shows the softmax -> fused sdpa replacement
    panel = text[text.index('id="block-attn_core"'):]
    panel = panel[: panel.index("</div>")]
    assert "softmax_warp_forward" in panel and "cudnn_generated_fort_native_sdpa" in panel


def test_html_escapes_labels(tmp_path):
    r = diff_modules(EAGER, SDPA, labels=["<b>a</b>", "b&c"])
    text = render_diff_html(r)
    assert "<b>a</b>" not in text and "&lt;b&gt;a&lt;/b&gt;" in text and "b&amp;c" in text


def test_writes_are_atomic_and_checked(res, tmp_path):
    out = write_diff_html(res, tmp_path / "r.html")
    assert out.exists() and not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(WriteError, match="does not exist"):
        write_diff_html(res, tmp_path / "missing" / "r.html")


def test_xlsx_diff(tmp_path):
    from openpyxl import load_workbook

    out = tmp_path / "diff.xlsx"
    r = diff_modules(EAGER, SDPA, labels=["eager", "sdpa"], output_xlsx=out)
    assert r.output_xlsx == str(out)
    wb = load_workbook(out, read_only=True)
    assert wb.sheetnames == ["Blocks", "Kernel Matches", "Annotations", "Budget", "Category Mismatches", "Sides"]
    rows = list(wb["Blocks"].iter_rows(values_only=True))
    assert rows[0][1] == "Block" and rows[1][0] == "★" and rows[1][1] == r.top_block == "attn_core"
    assert rows[-1][1] == "Total" and abs(rows[-1][3] - r.total_a_us) < 1e-2
    kinds = {row[1] for row in wb["Annotations"].iter_rows(min_row=2, values_only=True)}
    assert {"FUSION", "MISSING"} <= kinds
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


@pytest.mark.browser
def test_block_table_renders_in_headless_chromium(res, tmp_path):
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium not installed (make test installs it on Debian)")
    page = write_diff_html(res, tmp_path / "report.html")
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "HOME": str(tmp_path)})
    try:
        dom, errs = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("chromium did not finish within 90 s")
    assert proc.returncode == 0, errs[-2000:]
    # the inline script ran on the parsed table: one row per block plus the total row
    m = re.search(r'<table id="blocks" data-rendered-rows="(\d+)">', dom)
    assert m, dom[:2000]
    assert int(m.group(1)) == len(res.blocks) + 1
    assert "attn_core" in dom and "<svg" in dom
