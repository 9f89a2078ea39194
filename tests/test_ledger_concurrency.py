"""Two processes writing one ledger at once; a writer killed with SIGKILL loses at most its record in flight."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from mcp_server.ledger.engine import ledger_list, ledger_show
from mcp_server.ledger.record import record_candidate, record_experiment

ROOT = Path(__file__).resolve().parents[1]

WRITER = r"""
import sys
from mcp_server.ledger.record import record_candidate, record_decision, record_validation
db, tag, n, exp = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
res = {"accepted": False, "verdict": "not_faster", "reasons": [tag]}
for i in range(n):
    c = record_candidate(ledger=db, experiment_id=exp, proposal_id=f"{tag}-{i}", proposal=tag)
    record_validation(ledger=db, candidate_id=c.id, result=res)
    record_decision(ledger=db, candidate_id=c.id, decision="reverted", by=tag, why="slower")
    print(c.id, flush=True)
"""


def _spawn(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", WRITER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def test_two_processes_write_concurrently(tmp_path):
    db = str(tmp_path / "ledger.db")
    exp = record_experiment(ledger=db, target=["./bench"], cwd=str(tmp_path)).id
    n = 60
    procs = [_spawn(db, "agent-a", str(n), str(exp)), _spawn(db, "agent-b", str(n), str(exp))]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    ids = [int(x) for out, _ in outs for x in out.split()]
    assert len(ids) == len(set(ids)) == 2 * n
    shown = ledger_show(id=exp, ledger=db)
    assert len(shown.candidates) == 2 * n
    for v in shown.candidates:  # each candidate got exactly its own validation and decision
        assert len(v.validations) == 1 and len(v.decisions) == 1
        assert v.decisions[0].by == v.candidate.proposal  # the writer that made the candidate decided it
        assert v.status == "reverted"
    # both writers' records interleave (they really ran at the same time)
    owners = [v.candidate.proposal for v in shown.candidates]
    switches = sum(1 for a, b in zip(owners, owners[1:]) if a != b)
    assert switches >= 2
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_killed_writer_loses_at_most_the_record_in_flight(tmp_path):
    db = str(tmp_path / "ledger.db")
    exp = record_experiment(ledger=db, target=["./bench"], cwd=str(tmp_path)).id
    p = _spawn(db, "victim", "100000", str(exp))
    acknowledged = []
    deadline = time.monotonic() + 60
    while len(acknowledged) < 25 and time.monotonic() < deadline:
        line = p.stdout.readline()
        if line.strip():
            acknowledged.append(int(line))
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    assert len(acknowledged) == 25
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    shown = ledger_show(id=exp, ledger=db)
    have = {v.candidate.id for v in shown.candidates}
    assert set(acknowledged) <= have  # every acknowledged candidate survived
    done = [v for v in shown.candidates if v.decisions]
    # every record committed before the kill is there; at most the one candidate in flight is incomplete
    assert len(shown.candidates) - len(done) <= 1
    assert len(done) >= len(acknowledged)
    # and the ledger takes writes again at once (no stale lock)
    record_candidate(ledger=db, experiment_id=exp, proposal_id="after", proposal="after")
    assert ledger_list(ledger=db).experiments[0].candidates == len(shown.candidates) + 1
