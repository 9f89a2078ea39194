"""A loop resumed after its profile could not be parsed profiles again into its own report path (it used to stop
with "report exists (pass overwrite=true)"), and never replaces a report another ledger's loop left there.

run_ncu here is the real operation over a fake ``ncu`` (tests/test_ncu_runner.py's script) that writes the
report named by FAKE_NCU_REPORT: first a damaged one (the parse fails), then a real H200 report."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_ncu_runner import fake_ncu  # noqa: F401  (the fixture)

from mcp_server.core.errors import KernelscopeError
from mcp_server.ledger.engine import ledger_show
from mcp_server.loop.engine import report_path, run_loop

TARGET = ["python", "bench.py"]


def test_a_resumed_loop_replaces_its_own_unparsed_report(fake_ncu, monkeypatch):  # noqa: F811
    monkeypatch.chdir(fake_ncu)
    good = Path(fake_ncu / "fixture.ncu-rep")
    damaged = fake_ncu / "damaged.ncu-rep"
    damaged.write_bytes(b"NVR" + b"\x00" * 64)
    monkeypatch.setenv("FAKE_NCU_REPORT", str(damaged))
    with pytest.raises(KernelscopeError):
        run_loop(TARGET, ledger="l.db")
    left = fake_ncu / "reports" / "e1-p1.ncu-rep"
    assert left.read_bytes() == damaged.read_bytes() and ledger_show(id=1, ledger="l.db").profiles == []
    monkeypatch.setenv("FAKE_NCU_REPORT", str(good))
    res = run_loop(TARGET, ledger="l.db")
    assert res.resumed and res.stopped == "no_proposals" and res.candidate
    assert Path(res.report).resolve() == left.resolve() and left.read_bytes() == good.read_bytes()
    assert [Path(p.report_path).resolve() for p in ledger_show(id=1, ledger="l.db").profiles] == [left.resolve()]


def test_a_report_left_by_another_target_is_kept(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    first = reports / "e1-p1.ncu-rep"
    assert report_path(reports, 1, 1, TARGET) == first
    first.write_bytes(b"report of another ledger's loop")
    (reports / "e1-p1.ncu-rep.json").write_text(json.dumps({"target": ["python", "other.py"]}))
    assert report_path(reports, 1, 1, TARGET) == reports / "e1-p1-2.ncu-rep"
    (reports / "e1-p1.ncu-rep.json").write_text(json.dumps({"target": TARGET}))
    assert report_path(reports, 1, 1, TARGET) == first  # its own leftover: replaced
    (reports / "e1-p1.ncu-rep.json").unlink()  # killed before the sidecar: kept, the next name is used
    assert report_path(reports, 1, 1, TARGET) == reports / "e1-p1-2.ncu-rep"
