"""SIGKILL in the middle of every writer: outputs never corrupted, no temp file after the next run;
and the writers' contracts through recategorize (symlinked report, read-only report)."""
from __future__ import annotations

import os
import shutil
import stat
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from kill_writers import WRITERS, run  # noqa: E402

from mcp_server.core.errors import WriteError  # noqa: E402


@pytest.mark.parametrize("w", WRITERS, ids=[w.name for w in WRITERS])
def test_kill_mid_write(tmp_path, w):
    st = run(w, tmp_path, iterations=3, seed=7)
    assert st.iterations == 3
    assert st.corrupted == 0 and st.temps_after_next_run == 0, st.failures


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from kill_writers import _report

    return _report(tmp_path_factory.mktemp("rep"))


def test_recategorize_through_a_symlink_writes_the_report_and_keeps_the_link(tmp_path, report):
    from kill_writers import _recat_inplace_setup

    from mcp_server.compare.recategorize import recategorize

    st = _recat_inplace_setup(tmp_path)
    real = tmp_path / "store" / "r.xlsx"
    real.parent.mkdir()
    shutil.copyfile(report, real)
    link = tmp_path / "link.xlsx"
    link.symlink_to(real)
    res = recategorize([str(link)], categories=st["cats"][0])
    assert res.total_changed > 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes() != report.read_bytes()
    assert sorted(p.name for p in real.parent.iterdir()) == ["r.xlsx"]
    # --output-dir through a link to a report there: the link's target gets the copy
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = tmp_path / "store" / "copy.xlsx"
    target.write_bytes(b"old")
    (out_dir / report.name).symlink_to(target)
    recategorize([str(report)], output_dir=str(out_dir))
    assert (out_dir / report.name).is_symlink() and target.read_bytes() == report.read_bytes()


def test_read_only_report_is_refused_and_untouched(tmp_path, report):
    from kill_writers import _recat_inplace_setup

    from mcp_server.compare.recategorize import recategorize
    from mcp_server.core.categories import load_categories
    from mcp_server.reports import plan_recategorize, write_plan

    st = _recat_inplace_setup(tmp_path)
    p = tmp_path / "ro.xlsx"
    shutil.copyfile(report, p)
    os.chmod(p, 0o444)
    before = p.read_bytes()
    with pytest.raises(WriteError, match="read-only") as ei:
        recategorize([str(p)], categories=st["cats"][0])
    assert str(p) in str(ei.value)
    assert p.read_bytes() == before and stat.S_IMODE(os.stat(p).st_mode) == 0o444
    plan, _ = plan_recategorize(p, load_categories(st["cats"][0]))
    write_plan(plan, p, force=True)  # the forced overwrite keeps the mode
    assert p.read_bytes() != before and stat.S_IMODE(os.stat(p).st_mode) == 0o444


def test_read_only_analyze_report_fails_before_the_build_unless_forced(tmp_path, report):
    from kill_writers import _analysis

    from mcp_server.reports.xlsx_writer import write_analysis_report

    p = tmp_path / "r.xlsx"
    shutil.copyfile(report, p)
    os.chmod(p, 0o444)
    before, ino = p.read_bytes(), os.stat(p).st_ino
    with pytest.raises(WriteError, match=r"read-only \(mode 0444\)"):
        write_analysis_report(_analysis(tmp_path), p)
    assert p.read_bytes() == before and os.stat(p).st_ino == ino
    write_analysis_report(_analysis(tmp_path), p, force=True)  # replaced (a new inode), mode kept
    assert os.stat(p).st_ino != ino and stat.S_IMODE(os.stat(p).st_mode) == 0o444
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.xlsx"]
